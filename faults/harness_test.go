//go:build faults

package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/redistest"
)

var (
	long       = flag.Bool("long", false, "run the soak profile: more clients, acquisitions and time")
	reportPath = flag.String("report", "", "write the table of scenario results (Markdown) to this file")
)

// sized picks the short (CI) or the long (soak) profile's number.
func sized(short, soak int) int {
	if *long {
		return soak
	}
	return short
}

// row is what a scenario checked and found; faults/RESULTS.md keeps the last soak profile.
type row struct {
	Scenario      string
	Acquisitions  int // critical sections checked
	Overlaps      int // entries while another holder was inside
	OutOfOrder    int // entries whose token was not above all before: a fenced resource refuses their writes
	StaleAccepted int // writes of a holder that had lost its lock, accepted by the fenced resource
	StaleRejected int // the same, refused by their token
	Losses        int // leases that reported their loss
	Orphans       int // holds left behind once the faults ended
	Resurrected   int // holds that came back after their key was deleted
	Note          string
}

// shared owns the servers that live for the whole test binary
// (linear_test.go's backends).
var shared = redistest.NewShared()

var results struct {
	sync.Mutex
	rows []row
}

// report records a scenario's row and fails the test on a count the
// scenario does not allow (every scenario allows none unless it says so in
// allow).
func report(t *testing.T, r row, allow ...string) {
	t.Helper()
	t.Logf("%+v", r)
	results.Lock()
	results.rows = append(results.rows, r)
	results.Unlock()
	allowed := strings.Join(allow, ",")
	for _, bad := range []struct {
		what string
		n    int
	}{{"overlaps", r.Overlaps}, {"out of order", r.OutOfOrder}, {"stale accepted", r.StaleAccepted},
		{"orphans", r.Orphans}, {"resurrected", r.Resurrected}} {
		if bad.n > 0 && !strings.Contains(allowed, bad.what) {
			t.Errorf("%s: %d %s", r.Scenario, bad.n, bad.what)
		}
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	if helperMain() || childMain() {
		return
	}
	code := m.Run()
	shared.Close()
	if *reportPath != "" {
		if err := writeReport(*reportPath); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func writeReport(path string) error {
	results.Lock()
	defer results.Unlock()
	sort.Slice(results.rows, func(i, j int) bool { return results.rows[i].Scenario < results.rows[j].Scenario })
	var b strings.Builder
	profile := "short"
	if *long {
		profile = "long"
	}
	fmt.Fprintf(&b, "Profile: %s. Each row: critical sections checked, and what the checkers found.\n\n", profile)
	b.WriteString("| scenario | acquisitions checked | overlaps | tokens out of order | stale writes accepted | stale writes rejected | losses reported | orphaned holds | resurrections | note |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	total := 0
	for _, r := range results.rows {
		total += r.Acquisitions
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %s |\n", r.Scenario, r.Acquisitions, r.Overlaps,
			r.OutOfOrder, r.StaleAccepted, r.StaleRejected, r.Losses, r.Orphans, r.Resurrected, r.Note)
	}
	fmt.Fprintf(&b, "\nIn all: %d acquisitions checked.\n", total)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// ctxFor bounds a scenario: a guard against a hang, never a synchronisation.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The user dlock's clients log in as on every server the suite starts:
// limited to the keys, channels and commands the README documents (with a
// Redlock's +info; a cluster's additions). The checks and the faults run
// as the default user.
const aclUser, aclPassword = "locks", "locks-secret"

// startServer starts a redis-server with dlock's ACL user.
func startServer(t *testing.T, args ...string) *redistest.Server {
	return redistest.Start(t, append(args, redistest.UserArgs(aclUser, aclPassword, redistest.RedlockACL)...)...)
}

// addUser creates dlock's ACL user, with rules, on servers already running
// (a Sentinel's master and replica).
func addUser(t *testing.T, rules []string, servers ...*redistest.Server) {
	args := []any{"ACL", "SETUSER", aclUser, "reset", "on", ">" + aclPassword}
	for _, r := range rules {
		args = append(args, r)
	}
	for _, srv := range servers {
		if err := srv.Client().Do(context.Background(), args...).Err(); err != nil {
			t.Fatalf("creating the ACL user: %v", err)
		}
	}
}

func startServers(t *testing.T, n int) []*redistest.Server {
	servers := make([]*redistest.Server, n)
	for i := range servers {
		servers[i] = startServer(t)
	}
	return servers
}

// redisAt is a go-redis client of addr logged in as dlock's ACL user,
// closed with the test. Timeouts are short so that a dropped reply fails a
// call instead of stalling it.
func redisAt(t *testing.T, addr string) *redis.Client {
	return redisWithTimeout(t, addr, 300*time.Millisecond)
}

// redisWithTimeout is redisAt with another read and write timeout.
func redisWithTimeout(t *testing.T, addr string, timeout time.Duration) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, Username: aclUser, Password: aclPassword,
		DialTimeout: time.Second, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func newClient(t *testing.T, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var nameSeq atomic.Int64

func lockName(t *testing.T) string {
	return fmt.Sprintf("%s#%d", strings.ReplaceAll(t.Name(), "/", ":"), nameSeq.Add(1))
}

// lockKey is the key of a lock under the default prefix, as DESIGN.md lays
// it out.
func lockKey(name string) string { return dlock.DefaultPrefix + "{" + name + "}" }

// holders runs a contention: workers each take the lock per times (or
// until ctx ends), hold it for hold or until the lease reports its loss,
// and let it go. Every critical section enters res with its token.
type holders struct {
	res      check.Fenced
	losses   atomic.Int64 // leases that ended while held
	failures atomic.Int64 // acquisitions that failed (faults allow them)
	noValid  atomic.Int64 // leases returned with no validity left
	gaveUp   atomic.Int64 // workers that stopped after patience without an acquisition

	errMu  sync.Mutex
	errors map[string]int // the failures' errors, counted
}

func (h *holders) failed(err error) {
	h.failures.Add(1)
	h.errMu.Lock()
	defer h.errMu.Unlock()
	if h.errors == nil {
		h.errors = map[string]int{}
	}
	h.errors[errorKind(err)]++
}

// errorKind names a failure for the report, without addresses or names.
func errorKind(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "waited out"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "i/o timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection reset"
	case errors.Is(err, dlock.ErrReplicaAck):
		return "too few replica acks"
	case strings.Contains(err.Error(), "TRYAGAIN"):
		return "TRYAGAIN (slot split mid-migration)"
	case strings.Contains(err.Error(), "MOVED"):
		return "MOVED (past go-redis's redirections)"
	}
	return err.Error()
}

// failureNote says how many acquisitions failed, and with what.
func (h *holders) failureNote() string {
	h.errMu.Lock()
	defer h.errMu.Unlock()
	given := ""
	if n := h.gaveUp.Load(); n > 0 {
		given = fmt.Sprintf("; %d workers gave up after %v without one", n, patience)
	}
	if len(h.errors) == 0 {
		return "no acquisition failed" + given
	}
	kinds := make([]string, 0, len(h.errors))
	for kind, n := range h.errors {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, kind))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("acquisitions failed: %s%s", strings.Join(kinds, ", "), given)
}

// patience is how long a worker goes on failing before it gives up: a
// scenario whose lock stays unreachable ends instead of running its guard
// out.
const patience = 20 * time.Second

// run starts workers and waits for them. lock is worker w's acquisition.
func (h *holders) run(ctx context.Context, workers, per int, hold time.Duration, lock func(ctx context.Context, w int) (*dlock.Lease, error)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			progress := time.Now()
			for got := 0; got < per && ctx.Err() == nil; {
				if time.Since(progress) > patience {
					h.gaveUp.Add(1)
					return
				}
				asked := time.Now()
				lease, err := lock(ctx, w)
				if err != nil {
					h.failed(err)
					// An unreachable node fails calls at once: pause, as a
					// caller would, instead of spinning.
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				got++
				progress = time.Now()
				if !lease.Deadline().After(time.Now()) {
					h.noValid.Add(1)
				}
				h.res.Enter(w, lease.Token(), asked)
				if hold > 0 {
					select {
					case <-lease.Done():
					case <-time.After(hold): // the workload: time spent holding
					}
				}
				if lease.Err() != nil {
					h.losses.Add(1)
				}
				h.res.Exit(w)
				_ = lease.Unlock(context.WithoutCancel(ctx))
			}
		}()
	}
	wg.Wait()
}

// expectAll fails the test unless every worker made all its acquisitions:
// the scenario's faults pass, and the lock must come back.
func (h *holders) expectAll(t *testing.T, want int) {
	t.Helper()
	if got := h.res.Result().Completed; got < want {
		t.Errorf("%d of %d acquisitions: %s", got, want, h.failureNote())
	}
}

// runThrough is run with a fault: fault starts once a quarter of the
// acquisitions are done (or when the workers end, if they never get that
// far), and runThrough returns when both have finished.
func (h *holders) runThrough(ctx context.Context, workers, per int, hold time.Duration,
	lock func(ctx context.Context, w int) (*dlock.Lease, error), fault func()) {
	var once sync.Once
	started := make(chan struct{})
	start := func() { once.Do(func() { close(started) }) }
	faulted := make(chan struct{})
	go func() {
		defer close(faulted)
		<-started
		fault()
	}()
	h.run(ctx, workers, per, hold, func(ctx context.Context, w int) (*dlock.Lease, error) {
		if h.res.Result().Completed >= workers*per/4 {
			start()
		}
		return lock(ctx, w)
	})
	start()
	<-faulted
}

// row is the contention's counts as a report row.
func (h *holders) row(scenario string) row {
	r := h.res.Result()
	return row{Scenario: scenario, Acquisitions: r.Completed, Overlaps: r.Overlaps, OutOfOrder: r.Stale,
		Losses: int(h.losses.Load())}
}

// freeWithin reports whether the lock key is gone within d: a hold left by
// a failed attempt or a lost release may last its TTL, no longer.
func freeWithin(ctx context.Context, rdb redis.UniversalClient, key string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		n, err := rdb.Exists(ctx, key).Result()
		if err == nil && n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// orphans is 1 when the lock is not free within its TTL and a margin.
func orphans(ctx context.Context, rdb redis.UniversalClient, name string, ttl time.Duration) int {
	if freeWithin(ctx, rdb, lockKey(name), ttl+ttl/2) {
		return 0
	}
	return 1
}

// fencedStore is the resource a lock protects, as fencing tokens mean it
// to work: it accepts a write only with a token at least the highest it
// has accepted.
type fencedStore struct {
	mu      sync.Mutex
	highest uint64
}

func (s *fencedStore) write(token uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return false
	}
	s.highest = token
	return true
}
