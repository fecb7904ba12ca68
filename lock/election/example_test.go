package election_test

import (
	"context"
	"fmt"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/election"
	"github.com/raftlock/raftlock/lock/memstore"
)

// Two replicas campaign for "scheduler": a is elected, b queues; when a
// resigns, the store hands the leadership to b, with a higher term.
func ExampleElection_Campaign() {
	store := memstore.New() // this process only; a cluster node in production
	defer store.Close()
	c := lock.New(store)
	e := election.New(c, "scheduler")
	ctx := context.Background()

	a, err := e.Campaign(ctx, "replica-a")
	if err != nil {
		panic(err)
	}
	leader, _ := e.Leader(ctx)
	fmt.Println("leader:", leader.Value, "term:", leader.Term)

	elected := make(chan *election.Leadership)
	go func() {
		b, err := e.Campaign(ctx, "replica-b") // blocks while a leads
		if err != nil {
			panic(err)
		}
		elected <- b
	}()

	if err := a.Resign(ctx); err != nil {
		panic(err)
	}
	<-a.Done()
	fmt.Println("a:", context.Cause(a.Context()))

	b := <-elected
	leader, _ = e.Leader(ctx)
	fmt.Println("leader:", leader.Value, "higher term:", b.Term() > a.Term())
	_ = b.Resign(ctx)
	// Output:
	// leader: replica-a term: 1
	// a: election: resigned
	// leader: replica-b higher term: true
}

// Leader observes the election without campaigning.
func ExampleElection_Leader() {
	store := memstore.New()
	defer store.Close()
	e := election.New(lock.New(store), "scheduler")
	ctx := context.Background()

	_, err := e.Leader(ctx)
	fmt.Println(err)
	// Output:
	// election: no leader for "scheduler"
}

// Observe follows the leadership as it changes, without polling.
func ExampleElection_Observe() {
	store := memstore.New()
	defer store.Close()
	e := election.New(lock.New(store), "scheduler")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	var lead *election.Leadership
	for ld, err := range e.Observe(ctx) {
		if err != nil {
			break
		}
		if ld.Term == 0 {
			fmt.Println("nobody leads")
			if lead != nil {
				break
			}
			lead, _ = e.Campaign(ctx, "10.0.0.7:8080")
			continue
		}
		fmt.Println("leader:", ld.Value)
		_ = lead.Resign(ctx)
	}
	// Output:
	// nobody leads
	// leader: 10.0.0.7:8080
	// nobody leads
}
