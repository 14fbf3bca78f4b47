package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// The examples run on miniredis, an in-process Redis, so they need no
// server; in production pass a client of your Redis, Sentinel or Cluster.
func exampleRedis() (*redis.Client, func()) {
	srv := miniredis.NewMiniRedis()
	srv.ClockTTL(true) // TTLs run on the real clock
	if err := srv.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	return rdb, func() { _ = rdb.Close(); srv.Close() }
}

func Example() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	lease, err := locks.Mutex("orders:42").Lock(ctx)
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	first := lease.Token()
	fmt.Println("holding", lease.Name(), "with a fencing token:", first > 0)

	_, err = locks.Mutex("orders:42").TryLock(ctx)
	fmt.Println("a second TryLock is refused:", errors.Is(err, dlock.ErrNotAcquired))

	if err := lease.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	lease, _ = locks.Mutex("orders:42").TryLock(ctx)
	fmt.Println("after unlock the next holder's token is higher:", lease.Token() > first)
	_ = lease.Unlock(ctx)

	// Output:
	// holding orders:42 with a fencing token: true
	// a second TryLock is refused: true
	// after unlock the next holder's token is higher: true
}

// Work done with the lease's context stops when the lease ends, here because
// someone removed the lock behind the holder's back.
func ExampleLease_Context() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	lease, err := locks.Mutex("reports").Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	work := lease.Context(ctx)
	rdb.Del(ctx, "dlock:{reports}") // an operator's force unlock

	<-work.Done() // the renewal is refused within TTL/3
	fmt.Println("work stopped; lease lost:", errors.Is(context.Cause(work), dlock.ErrLeaseLost))
	// Output: work stopped; lease lost: true
}

// WithWait bounds how long Lock waits for a busy lock.
func ExampleWithWait() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	holder, _ := locks.Mutex("nightly-report").Lock(ctx)
	defer holder.Unlock(ctx)

	_, err = locks.Mutex("nightly-report", dlock.WithWait(100*time.Millisecond)).Lock(ctx)
	fmt.Println("not acquired:", errors.Is(err, dlock.ErrNotAcquired))
	fmt.Println("because the wait ran out:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// not acquired: true
	// because the wait ran out: true
}

// Re-entry follows the call, through the context: a Lock whose context
// carries a hold of the lock (Lease.Context) re-enters it, so a function
// that takes the lock can call another that takes it too. Any other Lock,
// through the same handle or not, is another owner and waits: goroutines
// share one handle as they share a sync.Mutex.
func ExampleReentrantMutex() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	account := locks.ReentrantMutex("account:7")
	// debit takes the lock itself: it may be called alone, or by transfer,
	// which holds the lock already.
	debit := func(ctx context.Context) error {
		lease, err := account.Lock(ctx)
		if err != nil {
			return err
		}
		defer lease.Unlock(ctx)
		state, _ := account.Inspect(lease.Context(ctx))
		fmt.Println("debit: holds", state.WriteHolds, "of this call:", state.WriterIsOwner)
		return nil
	}
	transfer := func(ctx context.Context) error {
		lease, err := account.Lock(ctx)
		if err != nil {
			return err
		}
		defer lease.Unlock(ctx)
		return debit(lease.Context(ctx)) // carries the hold: debit re-enters it
	}
	_ = debit(ctx)
	_ = transfer(ctx)

	held, _ := account.Lock(ctx)
	_, err = account.TryLock(ctx) // ctx carries no hold: another owner, though the same handle
	fmt.Println("busy for another call:", errors.Is(err, dlock.ErrNotAcquired))
	_ = held.Unlock(ctx)
	// Output:
	// debit: holds 1 of this call: true
	// debit: holds 2 of this call: true
	// busy for another call: true
}

// Many readers share the lock; a writer has it alone. The writer may read
// too, with its lease's context, and keep reading past its write
// (downgrade); a reader may not write.
func ExampleRWMutex() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	config := locks.RWMutex("config")
	write, _ := config.Lock(ctx)
	read, _ := config.RLock(write.Context(ctx)) // the writer may read too
	_ = write.Unlock(ctx)                       // and keeps reading: a downgrade

	other, err := config.RLock(ctx) // no hold in ctx: another reader
	fmt.Println("another reader joins:", err == nil)
	_, err = config.TryLock(ctx)
	fmt.Println("a writer must wait:", errors.Is(err, dlock.ErrNotAcquired))
	_, err = config.Lock(read.Context(ctx))
	fmt.Println("a reader cannot upgrade:", errors.Is(err, dlock.ErrUpgrade))
	_ = other.Unlock(ctx)
	_ = read.Unlock(ctx)
	// Output:
	// another reader joins: true
	// a writer must wait: true
	// a reader cannot upgrade: true
}

// Two workers queue for a FairMutex while a third holds it: they get it in
// the order they asked.
func ExampleFairMutex() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	holder, err := locks.FairMutex("printer").Lock(ctx)
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	served := make(chan string, 2)
	for i, worker := range []string{"ana", "bo"} {
		go func() {
			lease, err := locks.FairMutex("printer").Lock(ctx)
			if err != nil {
				served <- err.Error()
				return
			}
			served <- worker
			_ = lease.Unlock(ctx)
		}()
		// For the example's sake, the next worker asks only once this one
		// waits in line.
		for info, _ := locks.Describe(ctx, "printer"); info.WritersWaiting <= i; info, _ = locks.Describe(ctx, "printer") {
			time.Sleep(time.Millisecond)
		}
	}
	_ = holder.Unlock(ctx) // hands the lock to ana, who hands it to bo
	fmt.Println(<-served, "then", <-served)

	// Output:
	// ana then bo
}

// A Semaphore of two permits: a third acquisition waits, or with TryAcquire
// is refused, until a permit comes back.
func ExampleSemaphore() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	downloads := locks.Semaphore("downloads", 2)
	a, _ := downloads.Acquire(ctx)
	b, _ := downloads.Acquire(ctx)
	_, err = downloads.TryAcquire(ctx)
	fmt.Println("third permit refused:", errors.Is(err, dlock.ErrNotAcquired))

	_, err = locks.Semaphore("downloads", 5).TryAcquire(ctx)
	fmt.Println("opened with another count:", errors.Is(err, dlock.ErrPermits))

	_ = a.Unlock(ctx)
	c, err := downloads.TryAcquire(ctx)
	fmt.Println("after a release:", err == nil)
	_ = b.Unlock(ctx)
	_ = c.Unlock(ctx)

	// Output:
	// third permit refused: true
	// opened with another count: true
	// after a release: true
}

// A transfer locks both accounts, whatever order it names them in; each
// account's store checks that account's fencing token.
func ExampleMultiLock() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	lease, err := locks.MultiLock([]string{"account:7", "account:3"}).Lock(ctx)
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	tokens := lease.Tokens()
	fmt.Println("holding", lease.Name(), "with a token each:", tokens["account:3"] > 0 && tokens["account:7"] > 0)

	_, err = locks.Mutex("account:7").TryLock(ctx)
	fmt.Println("account:7 alone is held too:", errors.Is(err, dlock.ErrNotAcquired))
	_ = lease.Unlock(ctx)

	// Output:
	// holding account:3,account:7 with a token each: true
	// account:7 alone is held too: true
}

// A pool of workers where only the leader schedules jobs. Each worker
// campaigns; the leader schedules while its leadership lasts (the lease's
// context ends if it is lost), then resigns, and the next worker leads in
// the next term.
func ExampleElection() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	var mu sync.Mutex
	var jobs int
	var log []string
	var terms []uint64
	var workers sync.WaitGroup
	for w := range 3 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			locks, err := dlock.New(rdb)
			if err != nil {
				fmt.Println("new:", err)
				return
			}
			defer locks.Close()
			scheduler := locks.Election("scheduler")
			lease, err := scheduler.Campaign(ctx, fmt.Sprint("worker-", w))
			if err != nil {
				return
			}
			leading := lease.Context(ctx)
			mu.Lock()
			first := jobs + 1
			for range 3 {
				if leading.Err() != nil {
					break // deposed: stop scheduling at once
				}
				jobs++ // schedule a job, fenced by the term: lease.Token()
			}
			terms = append(terms, lease.Token())
			log = append(log, fmt.Sprintf("leader %d scheduled jobs %d-%d", len(terms), first, jobs))
			mu.Unlock()
			_ = scheduler.Resign(ctx)
		}()
	}
	workers.Wait()
	for _, line := range log {
		fmt.Println(line)
	}
	fmt.Println("each in a later term:", len(terms) == 3 && terms[0] < terms[1] && terms[1] < terms[2])

	// Output:
	// leader 1 scheduled jobs 1-3
	// leader 2 scheduled jobs 4-6
	// leader 3 scheduled jobs 7-9
	// each in a later term: true
}

// A lock held on a majority of three independent Redis masters: it
// survives the loss of any one of them.
func ExampleNewRedlock() {
	var clients []redis.UniversalClient
	for range 3 {
		rdb, stop := exampleRedis()
		defer stop()
		clients = append(clients, rdb)
	}
	ctx := context.Background()
	// miniredis tells no uptime, which the restart guard needs: off here.
	// With real servers keep it on (see WithRestartGuard).
	redlock, err := dlock.NewRedlock(clients, dlock.WithTTL(10*time.Second), dlock.WithRestartGuard(0))
	if err != nil {
		fmt.Println("redlock:", err)
		return
	}

	lease, err := redlock.Mutex("payments:eu").Lock(ctx)
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	fmt.Println("held on a majority of", len(clients), "masters, quorum", redlock.Quorum(), "with a token:", lease.Token() > 0)
	fmt.Println("valid for most of its TTL:", time.Until(lease.Deadline()) > 9*time.Second)

	_, err = redlock.Mutex("payments:eu").TryLock(ctx)
	var quorum *dlock.QuorumError
	fmt.Println("a second owner is refused:", errors.As(err, &quorum) && errors.Is(err, dlock.ErrNotAcquired))
	_ = lease.Unlock(ctx)

	// Output:
	// held on a majority of 3 masters, quorum 2 with a token: true
	// valid for most of its TTL: true
	// a second owner is refused: true
}
