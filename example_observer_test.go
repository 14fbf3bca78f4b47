package dlock_test

import (
	"context"
	"fmt"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/observe"
)

// An Observer of one's own: here it prints what happens. For
// OpenTelemetry, use the module github.com/dlockio/dlock/dlockotel.
func ExampleWithObserver() {
	rdb, stop := exampleRedis()
	defer stop()
	obs := &observe.Observer{
		Acquire: func(ctx context.Context, call observe.AcquireCall) (context.Context, func(observe.AcquireDone)) {
			fmt.Println("acquiring a", call.Kind)
			return ctx, func(d observe.AcquireDone) { fmt.Println("acquire:", d.Outcome) }
		},
		End: func(ev observe.LeaseEnd) {
			if ev.Lost != "" {
				fmt.Println("lost:", ev.Lost)
				return
			}
			fmt.Println("released")
		},
	}
	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	lease, err := locks.Mutex("orders:42").Lock(ctx)
	if err != nil {
		return
	}
	_, _ = locks.Mutex("orders:42").TryLock(ctx)
	_ = lease.Unlock(ctx)

	// Output:
	// acquiring a mutex
	// acquire: acquired
	// acquiring a mutex
	// acquire: not_acquired
	// released
}
