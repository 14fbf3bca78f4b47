package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/observe"
)

// The library's errors speak of Go's API (leases, handles) and the os
// package's of how Go starts a process (fork/exec): here they are said in
// the words of the command line.

// errText is err for a line that starts "dlock COMMAND:": without the
// "dlock: " its own text starts with, and a lost lease said as lossWords
// say it.
func errText(err error) string {
	var reason observe.LossReason
	if errors.Is(err, dlock.ErrLeaseLost) && errors.As(err, &reason) && lossWords[reason] != "" {
		return lossWords[reason]
	}
	return strings.TrimPrefix(err.Error(), "dlock: ")
}

// lossWords say why a lock was lost, after "lost the lock NAME".
var lossWords = map[observe.LossReason]string{
	observe.LossExpired:     "it expired or was deleted",
	observe.LossTaken:       "another owner holds it",
	observe.LossForced:      "it was removed by force",
	observe.LossUnreachable: "Redis unreachable past its deadline", // nothing confirmed, nor refused
}

// lossText is errText for a lost lease whose deadline was deadline. A
// hold found gone (LossExpired) before it cannot have expired: it was
// removed. An RWMutex's or Semaphore's hold carries no mark of a removal
// by force (LossForced), so a DEL or FLUSHDB reads the same.
func lossText(err error, deadline time.Time) string {
	if errors.Is(err, dlock.LossExpired) && time.Now().Before(deadline) {
		return "it was forced open or deleted before its deadline"
	}
	return errText(err)
}

// releaseText says why a release failed, for "releasing NAME: …": the
// library's chain (the call, the name again, dial tcp …) is not the
// operator's.
func releaseText(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, dlock.LossUnreachable):
		return "Redis unreachable"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "Redis did not answer in time"
	}
	return printable(errText(err))
}

// cannotRun says why the command did not start: cannot run "NAME": why.
func cannotRun(err error) string {
	var notFound *exec.Error // not found in $PATH
	var failed *fs.PathError // fork/exec NAME
	switch {
	case errors.As(err, &notFound):
		return fmt.Sprintf("cannot run %q: %v", notFound.Name, notFound.Err)
	case errors.As(err, &failed):
		return fmt.Sprintf("cannot run %q: %v", failed.Path, failed.Err)
	}
	return "cannot run the command: " + err.Error()
}

// permitsError is a run whose --permits is not the number of permits the
// Semaphore has in Redis (has, 0 if unknown). It matches ErrPermits.
type permitsError struct {
	name       string
	given, has int
}

func (e permitsError) Error() string {
	has := "another number of permits"
	if e.has > 0 {
		has = plural(e.has, "permit")
	}
	return fmt.Sprintf("--permits %d, but the Semaphore %s has %s (every run of it must give the same number)", e.given, quoteCut(e.name), has)
}

func (e permitsError) Unwrap() error { return dlock.ErrPermits }

// namePermits is err, but an ErrPermits is a permitsError, with the
// number of permits Describe reads.
func namePermits(client *dlock.Client, name string, given int, err error) error {
	if !errors.Is(err, dlock.ErrPermits) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, _ := client.Describe(ctx, name)
	return permitsError{name: name, given: given, has: info.Permits}
}
