//go:build faults

package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// holderEnv, when set, makes the test binary a lock holder (addr, name
// and TTL in ms, separated by spaces) instead of running tests: a process
// the test can freeze with SIGSTOP.
const holderEnv = "DLOCK_FAULTS_HOLDER"

// helperMain runs the holder when the environment asks for it, and reports
// whether it did. The holder prints what it does, a line each:
//
//	acquired T    it holds the lock with token T
//	write T       it writes to the resource with token T, every TTL/10
//	lost          its lease reported the loss
//	unlock E      its Unlock returned E ("ok", "not-held" or the error)
//
// Once lost, it writes once more with its old token, as a process would
// whose write was under way when it was frozen; then it unlocks and exits.
func helperMain() bool {
	spec := os.Getenv(holderEnv)
	if spec == "" {
		return false
	}
	fields := strings.Fields(spec)
	ms, _ := strconv.Atoi(fields[2])
	ttl := time.Duration(ms) * time.Millisecond
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: fields[0], Username: aclUser, Password: aclPassword})
	locks, err := dlock.New(rdb, dlock.WithTTL(ttl))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	lease, err := locks.Mutex(fields[1]).Lock(ctx)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("acquired", lease.Token())
	for lease.Err() == nil {
		fmt.Println("write", lease.Token())
		select {
		case <-lease.Done():
		case <-time.After(ttl / 10):
		}
	}
	fmt.Println("lost")
	fmt.Println("write", lease.Token())
	switch err := lease.Unlock(ctx); {
	case err == nil:
		fmt.Println("unlock ok")
	case errors.Is(err, dlock.ErrNotHeld):
		fmt.Println("unlock not-held")
	default:
		fmt.Println("unlock", err)
	}
	os.Exit(0)
	return true
}

// (4) A holder process frozen for three TTLs (SIGSTOP). Pass: another
// client gets the lock after the TTL, with a higher token; the frozen one
// reports its loss as soon as it runs again; its write with the old token
// is refused by the resource; its Unlock is ErrNotHeld and leaves the new
// holder's lock alone.
func TestScenario04_HolderPausedPastItsTTL(t *testing.T) {
	const ttl = 500 * time.Millisecond
	rounds := sized(2, 10)
	srv := startServer(t)
	ctx := ctxFor(t, 2*time.Minute)
	r := row{Scenario: "04 holder process frozen 3 TTLs"}
	var lossDelays []time.Duration
	for range rounds {
		name := lockName(t)
		var store fencedStore
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", holderEnv, srv.Addr(), name, ttl.Milliseconds()))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := make(chan string)
		go func() {
			defer close(lines)
			for sc := bufio.NewScanner(out); sc.Scan(); {
				lines <- sc.Text()
			}
		}()
		next := func(prefix string) string {
			t.Helper()
			for {
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatalf("the holder exited before %q", prefix)
					}
					if strings.HasPrefix(line, "write ") {
						token, _ := strconv.ParseUint(strings.TrimPrefix(line, "write "), 10, 64)
						if !store.write(token) {
							r.StaleRejected++
						} else if prefix == "unlock" { // a write after its loss got through
							r.StaleAccepted++
						}
					}
					if strings.HasPrefix(line, prefix) {
						return strings.TrimSpace(strings.TrimPrefix(line, prefix))
					}
				case <-ctx.Done():
					t.Fatalf("no %q from the holder", prefix)
				}
			}
		}
		first, _ := strconv.ParseUint(next("acquired"), 10, 64)
		next("write")
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		frozen := time.Now()
		other, err := newClient(t, srv.Client(), dlock.WithTTL(ttl)).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if other.Token() <= first || !store.write(other.Token()) {
			t.Fatalf("the new holder's token %d after %d", other.Token(), first)
		}
		r.Acquisitions += 2
		<-time.After(time.Until(frozen.Add(3 * ttl))) // the fault: frozen 3 TTLs
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed := time.Now()
		next("lost")
		lossDelays = append(lossDelays, time.Since(resumed))
		r.Losses++
		if got := next("unlock"); got != "not-held" {
			t.Errorf("the frozen holder's Unlock: %s; want ErrNotHeld", got)
		}
		if left, err := other.TTL(ctx); err != nil || other.Err() != nil {
			t.Errorf("the new holder after the old one's Unlock: TTL %v, %v, lease %v", left, err, other.Err())
			r.Overlaps++
		}
		_ = other.Unlock(ctx)
	}
	r.Note = fmt.Sprintf("loss reported %v after SIGCONT", lossDelays)
	report(t, r)
	if r.StaleRejected < rounds {
		t.Errorf("%d stale writes refused in %d rounds; each round makes one", r.StaleRejected, rounds)
	}
}
