package dlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlocktest"
)

// A worker does its work under lease.Context, so it stops by itself when the
// lock is lost. Steal shows that it does: another owner takes the lock, the
// worker's next renewal is refused, and its context is cancelled with the
// loss as its cause.
func ExampleRedis_Steal() {
	r, err := dlocktest.NewRedis("") // in a test: dlocktest.Start(t)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	ctx := context.Background()

	lease, err := r.Client(dlock.WithTTL(300 * time.Millisecond)).Mutex("reindex").Lock(ctx)
	if err != nil {
		panic(err)
	}
	work := lease.Context(ctx)

	thief, err := r.Steal(ctx, "reindex")
	if err != nil {
		panic(err)
	}
	defer thief.Unlock(ctx)

	<-work.Done() // the worker's loop would select on this
	fmt.Println("worker stopped:", errors.Is(context.Cause(work), dlock.ErrLeaseLost))
	fmt.Println("thief's token is newer:", thief.Token() > lease.Token())
	// Output:
	// worker stopped: true
	// thief's token is newer: true
}

// A standby takes over when the leader's process is cut off from Redis:
// Disconnect cuts one Client off, while the others go on.
func ExampleRedis_Disconnect() {
	r, err := dlocktest.NewRedis("")
	if err != nil {
		panic(err)
	}
	defer r.Close()
	ctx := context.Background()
	primary, standby := r.Client(dlock.WithTTL(300*time.Millisecond)), r.Client(dlock.WithTTL(300*time.Millisecond))

	leading, err := primary.Election("db-primary").Campaign(ctx, "host-a")
	if err != nil {
		panic(err)
	}
	takeover := make(chan *dlock.Lease)
	go func() {
		lease, err := standby.Election("db-primary").Campaign(ctx, "host-b")
		if err != nil {
			panic(err)
		}
		takeover <- lease
	}()

	if err := r.Disconnect(primary); err != nil { // host-a's network fails
		panic(err)
	}
	<-leading.Done()
	fmt.Println("host-a stepped down:", errors.Is(leading.Err(), dlock.LossUnreachable))
	next := <-takeover
	defer next.Unlock(ctx)
	leader, err := standby.Election("db-primary").Leader(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("leader now:", leader.Value, leader.Term > leading.Token())
	// Output:
	// host-a stepped down: true
	// leader now: host-b true
}

// A cron job that runs on many hosts takes the lock with TryLock: the host
// that gets it runs the job, the others skip this round.
func ExampleNew_cronJob() {
	r, err := dlocktest.NewRedis("")
	if err != nil {
		panic(err)
	}
	defer r.Close()
	ctx := context.Background()

	runReport := func(host string, c *dlock.Client) {
		lease, err := c.Mutex("nightly-report").TryLock(ctx)
		if errors.Is(err, dlock.ErrNotAcquired) {
			fmt.Println(host, "skips: another host runs the report")
			return
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(host, "runs the report")
		// Left held here, as if host-a were still running it.
		_ = lease
	}
	runReport("host-a", r.Client())
	runReport("host-b", r.Client())
	// Output:
	// host-a runs the report
	// host-b skips: another host runs the report
}

// A store that trusts fencing tokens refuses the write of a holder that lost
// its lock, however late that holder acts.
func ExampleFencedStore() {
	r, err := dlocktest.NewRedis("")
	if err != nil {
		panic(err)
	}
	defer r.Close()
	ctx := context.Background()
	var store dlocktest.FencedStore

	old, err := r.Client().Mutex("invoice:42").Lock(ctx)
	if err != nil {
		panic(err)
	}
	newer, err := r.Steal(ctx, "invoice:42") // old is paused, say, past its TTL
	if err != nil {
		panic(err)
	}
	defer newer.Unlock(ctx)

	fmt.Println("newer holder writes:", store.Put("invoice:42", newer.Token(), "paid"))
	err = store.Put("invoice:42", old.Token(), "draft") // the old holder wakes up and writes
	fmt.Println("stale write refused:", errors.Is(err, dlocktest.ErrStaleToken))
	// Output:
	// newer holder writes: <nil>
	// stale write refused: true
}
