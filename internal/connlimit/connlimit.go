// Package connlimit bounds how many accepted connections are open at once,
// for the transport's peer listener and the HTTP API's alike: a server
// takes a place before each Accept and wraps what it accepted in Conn,
// which gives the place back on its first Close. Once every place is taken,
// Take waits for one, and says so (through the warn function it was given)
// at most once a minute, with the count of waits since.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/internal/quietlog"
)

// WarnEvery bounds how often a Limiter calls its warn function.
const WarnEvery = time.Minute

// Limiter holds max places. Safe for concurrent use.
type Limiter struct {
	max     int
	slots   chan struct{} // one element per place taken
	warn    func(waits int)
	warned  *quietlog.Every
	waitsAt atomic.Uint64 // Takes that had to wait, ever
}

// New returns a Limiter of max places (max > 0). warn, called when a Take
// has to wait (rate-limited, see WarnEvery), is told how many did since it
// was last called.
func New(max int, warn func(waits int)) *Limiter {
	return &Limiter{max: max, slots: make(chan struct{}, max), warn: warn, warned: quietlog.NewEvery(WarnEvery)}
}

// Max is the number of places.
func (l *Limiter) Max() int { return l.max }

// Waits is how many Takes had to wait since the Limiter was made, for a
// metric: a count that only grows.
func (l *Limiter) Waits() uint64 { return l.waitsAt.Load() }

// Take takes a place, waiting for one while all are taken; false when done
// closed first.
func (l *Limiter) Take(done <-chan struct{}) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	l.full()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// Give gives back a place taken for an Accept that failed.
func (l *Limiter) Give() { <-l.slots }

// Conn wraps c, accepted with a place taken, so that its first Close gives
// the place back.
func (l *Limiter) Conn(c net.Conn) net.Conn { return &conn{Conn: c, release: l.Give} }

func (l *Limiter) full() {
	l.waitsAt.Add(1)
	if waits, tell := l.warned.Note(); tell {
		l.warn(waits)
	}
}

// conn gives its place back once, on its first Close.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
