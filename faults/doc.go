// Package faults is dlock's fault-injection suite: scenarios that run the
// locks through network faults (Toxiproxy, embedded), server stalls,
// restarts and failovers, and paused holders, against real redis-server
// processes on loopback, and check every history they record.
//
// It is a module of its own so that Toxiproxy, porcupine (package linear,
// the checker of histories) and their dependencies never become
// dependencies of dlock, and its tests build only with the faults tag:
//
//	cd faults && go test -tags faults -race ./...         # short profile (CI)
//	cd faults && go test -tags faults -long -timeout 30m . # soak profile
//	cd faults && go test -tags faults -report R.md .       # write the table
//
// docs/SAFETY.md explains what each scenario shows.
package faults
