package election

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/raftlock/raftlock/lock"
)

// Campaign blocks until this caller is elected, and returns its leadership;
// or until ctx is done (the error matches ctx.Err(), and the caller holds and
// waits for nothing). Campaigners are elected in the order they queued. value,
// if not empty, is published for Leader to report while this caller leads
// (see the package documentation); Campaign returns only once it is.
//
// ctx bounds the campaign only: the leadership it returns lasts until Resign
// or until its lease is lost, whatever happens to ctx.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := e.validate(value); err != nil {
		return nil, err
	}
	for {
		lead, err := e.campaign(ctx, value)
		if lead != nil || err != nil {
			return lead, err
		}
		// The store's longest queueing (lock.MaxWait) ran out: queue again.
	}
}

// campaign queues once. It returns (nil, nil) when the wait ran out.
func (e *Election) campaign(ctx context.Context, value string) (*Leadership, error) {
	// The value rides with the election's key as its metadata, so that an
	// observer learns it with the term in one read (it fits: a value must
	// fit in a key, which is shorter than lock.MaxMetadataLen).
	l := e.client.Lock(e.Key(), lock.TTL(e.ttl), lock.Metadata(value))
	lead := &Leadership{
		election: e,
		value:    value,
		elected:  make(chan struct{}),
		resign:   make(chan struct{}),
		ended:    make(chan struct{}),
	}
	// The lease must outlive ctx, which bounds only the campaign; runCtx is
	// canceled when the campaign gives up before it is elected.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	var ran bool
	go func() {
		defer close(lead.ended)
		defer stopRun()
		ran, lead.err = l.Run(runCtx, func(ctx context.Context) error { return lead.hold(ctx, l) })
	}()

	select {
	case <-lead.elected:
		return lead, nil
	case <-lead.ended:
	case <-ctx.Done():
		stopRun() // leaves the queue, or gives back a leadership that raced
		<-lead.ended
		return nil, fmt.Errorf("election: campaigning for %q: %w", e.name, ctx.Err())
	}
	if lead.err != nil {
		return nil, fmt.Errorf("election: campaigning for %q: %w", e.name, lead.err)
	}
	if ran {
		return nil, fmt.Errorf("election: campaigning for %q: leadership ended before it began", e.name)
	}
	return nil, nil
}

// Leadership is one term of leadership, from Campaign. Its methods are safe
// for concurrent use.
type Leadership struct {
	election *Election
	value    string
	elected  chan struct{} // closed once elected (and the value published)
	resign   chan struct{} // closed by Resign
	once     sync.Once     // closes resign

	// Set before elected is closed, then never changed.
	term   uint64
	ctx    context.Context
	cancel context.CancelCauseFunc

	ended chan struct{} // closed when the lease is given back or lost
	err   error         // what lock.Lock.Run reported; read after ended
}

// hold runs under the election's lease: it publishes the value, says the
// campaign was won, and leads until the lease is lost or Resign is called.
func (lead *Leadership) hold(leaseCtx context.Context, l *lock.Lock) error {
	lead.term = l.Token()
	lead.ctx, lead.cancel = context.WithCancelCause(leaseCtx)
	defer lead.cancel(context.Canceled)
	if lead.value == "" {
		lead.lead()
		return nil
	}
	e := lead.election
	published := e.client.Lock(valueKey(e.name, lead.term, lead.value), lock.TTL(e.ttl))
	// The value's own lease failing later does not end the leadership: Leader
	// then reports the term without a value.
	ran, err := published.TryRun(lead.ctx, func(context.Context) error {
		lead.lead()
		return nil
	})
	switch {
	case !ran && err == nil:
		// Only the leader of this term can hold that key (tokens are unique), so
		// only another user of the "election-leader:" prefix can get here.
		return fmt.Errorf("election: the key %q is already held", published.Key())
	case !ran:
		return fmt.Errorf("election: publishing the leader's value: %w", err)
	}
	return nil
}

// lead reports the election won and waits for the leadership to end.
func (lead *Leadership) lead() {
	close(lead.elected)
	select {
	case <-lead.ctx.Done():
	case <-lead.resign:
		lead.cancel(ErrResigned)
	}
}

// Term is the leadership's fencing token: greater than every earlier
// leader's. Pass it with every write the leader makes.
func (lead *Leadership) Term() uint64 { return lead.term }

// Value is what Campaign published.
func (lead *Leadership) Value() string { return lead.value }

// Done is closed when the leadership ends: on Resign, or as soon as the lease
// is or may be lost (its extends failed until its conservative local deadline,
// or the store said it was gone). Stop acting as leader then.
func (lead *Leadership) Done() <-chan struct{} { return lead.ctx.Done() }

// Context is canceled when the leadership ends, as Done is closed; give it to
// the leader's work. context.Cause reports why: ErrResigned after Resign, an
// error matching lock.ErrNotHeld when the lease was lost. It carries the values
// of Campaign's context, not its cancellation.
func (lead *Leadership) Context() context.Context { return lead.ctx }

// Resign gives the leadership up and hands it to the next campaigner, and
// returns once the store has the lease back (or ctx is done). It returns nil
// also when the leadership had already been lost, and when called again. An
// error means the release failed: the lease then runs out by itself within
// the TTL.
func (lead *Leadership) Resign(ctx context.Context) error {
	lead.once.Do(func() { close(lead.resign) })
	select {
	case <-lead.ended:
	case <-ctx.Done():
		return fmt.Errorf("election: resigning %q: %w", lead.election.name, ctx.Err())
	}
	if lead.err != nil && !errors.Is(lead.err, lock.ErrNotHeld) {
		return fmt.Errorf("election: resigning %q (the lease runs out by itself): %w", lead.election.name, lead.err)
	}
	return nil
}
