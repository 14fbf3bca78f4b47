package dlock_test

import (
	"context"
	"fmt"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
)

// Every hold of this Client says which process took it and why: an
// operator's Describe (or `dlock status`) shows it beside the holder.
func ExampleWithHolderInfo() {
	rdb, stop := exampleRedis()
	defer stop()
	info := admin.ThisProcess() // hostname, pid, program
	info.User = "nightly import, started by cron"
	locks, err := dlock.New(rdb, dlock.WithHolderInfo(info))
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()
	ctx := context.Background()

	lease, err := locks.Mutex("imports").Lock(ctx)
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	defer lease.Unlock(ctx)

	described, err := locks.Describe(ctx, "imports")
	if err != nil {
		fmt.Println("describe:", err)
		return
	}
	holder := described.Holders[0].Info
	fmt.Println(holder.User)
	fmt.Println("this process:", holder.PID == info.PID && holder.Hostname == info.Hostname)
	// Output:
	// nightly import, started by cron
	// this process: true
}
