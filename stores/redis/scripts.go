package redis

import (
	"embed"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/lock"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// scripts are the store's server-side steps. Each is the shared state
// code (lua/state.lua) followed by its own body, so that every step reads
// and writes a key's state the same way.
type scripts struct {
	acquire, acquireAll, release, extend, inspect, force, list, session, watch *goredis.Script
}

// A release is remembered as long as the cluster's state machine
// remembers one (lock.Store's Release: 5 minutes, at most 65,536
// releases), so that a repeat is answered alike by every store. A test
// keeps these equal to the machine's.
const (
	releaseMemory         = 5 * time.Minute
	maxRememberedReleases = 1 << 16
)

func loadScripts() scripts {
	shared := fmt.Sprintf("local MAX_HOLDERS = %d\nlocal MAX_WAITERS = %d\nlocal RELEASE_MEMORY = %d\nlocal MAX_RELEASES = %d\n",
		lock.MaxHolders, lock.MaxWaiters, us(releaseMemory), maxRememberedReleases) + luaSource("state")
	script := func(name string) *goredis.Script {
		return goredis.NewScript(shared + "\n" + luaSource(name))
	}
	return scripts{
		acquire:    script("acquire"),
		acquireAll: script("acquire_all"),
		release:    script("release"),
		extend:     script("extend"),
		inspect:    script("inspect"),
		force:      script("force"),
		list:       script("list"),
		session:    script("session"),
		watch:      script("watch"),
	}
}

func luaSource(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("redis store: embedded script %s missing: %v", name, err)) // a build without lua/ is broken
	}
	return string(b)
}
