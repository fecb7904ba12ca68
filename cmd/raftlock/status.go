package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/raftlock/raftlock/api"
)

// leaderLevelOf is the command level the leader told, 0 when the members
// list no leader or it has not told.
func leaderLevelOf(members []api.Member) int {
	for _, m := range members {
		if m.Leader {
			return m.Level
		}
	}
	return 0
}

// buildCells are a member's VERSION and LEVEL cells in raftlock status:
// "-" for what it has not told, and a LEVEL that says so when the member
// reads less than the leader (leaderLevel, 0 when not known).
func buildCells(m api.Member, leaderLevel int) (version, level string) {
	version, level = "-", "-" // not told (yet), or a version too old to tell
	if m.Version != "" {
		version = m.Version
	}
	if m.Level > 0 {
		level = fmt.Sprint(m.Level)
	}
	if m.BelowLeaderLevel {
		below := " (BELOW THE LEADER)"
		if leaderLevel > 0 {
			below = fmt.Sprintf(" (BELOW THE LEADER'S %d)", leaderLevel)
		}
		level += below
	}
	return version, level
}

// printBelowLeader explains, under the members table, what the members
// marked below the leader's level mean for an upgrade.
func printBelowLeader(w io.Writer, members []api.Member, leaderLevel int) {
	var below []string
	leaderVersion := ""
	for _, m := range members {
		if m.BelowLeaderLevel {
			below = append(below, m.ID)
		}
		if m.Leader {
			leaderVersion = m.Version
		}
	}
	if len(below) == 0 {
		return
	}
	install := "the leader's raftlock version"
	if leaderVersion != "" {
		install = "raftlock " + leaderVersion + " (the leader's)"
	}
	fmt.Fprintf(w, "\nbelow the leader's command level %d: %s; the leader refuses the commands they cannot read\n"+
		"(member_too_old) until they run %s\n", leaderLevel, strings.Join(below, ", "), install)
}
