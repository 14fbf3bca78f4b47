package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockio/dlock"
)

// A holder watches AtRisk to stop starting new work while its renewals are
// not getting through, and reads from the error why its lease was lost:
// here an operator removed the lock by force.
func ExampleLease_AtRisk() {
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
		fmt.Println("lock:", err)
		return
	}
	if _, err := locks.ForceUnlock(ctx, "reports"); err != nil {
		fmt.Println("force unlock:", err)
		return
	}
	select {
	case <-lease.AtRisk(): // closed when renewals fail for half the TTL, and on any loss
		fmt.Println("at risk: checkpoint and stop taking new work")
	case <-time.After(5 * time.Second):
		fmt.Println("not at risk")
	}
	<-lease.Done()
	var reason dlock.LossReason
	if errors.As(lease.Err(), &reason) {
		fmt.Println("lost:", errors.Is(lease.Err(), dlock.ErrLeaseLost), reason == dlock.LossForced)
	}
	// Output:
	// at risk: checkpoint and stop taking new work
	// lost: true true
}
