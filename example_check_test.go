package dlock_test

import (
	"context"
	"fmt"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
)

// A program that refuses to start on Redis servers that could break its
// locks, and warns about what it could not confirm.
func ExampleClient_Check() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()

	report, err := locks.Check(context.Background())
	if err != nil {
		fmt.Println("check:", err)
		return
	}
	for _, node := range report.Nodes {
		for _, p := range node.Problems {
			// miniredis tells no memory policy: the check says so.
			fmt.Println(p.Severity, p.Check)
		}
	}
	if report.Worst() >= admin.SeverityError {
		fmt.Println("refusing to start")
		return
	}
	fmt.Println("starting")

	// Output:
	// warning info
	// starting
}
