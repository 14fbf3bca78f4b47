package dlock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
	"github.com/dlockio/dlock/observe"
)

// Servers shared by the tests of this package that need no server of their
// own; tests that restart, pause or flush a server start their own.
var (
	shared         = redistest.NewShared()
	standaloneOnce sync.Once
	standalone     *redistest.Server
	clusterOnce    sync.Once
	cluster        *redistest.Cluster
)

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	os.Exit(code)
}

func sharedStandalone() *redistest.Server {
	standaloneOnce.Do(func() { standalone = redistest.Start(shared) })
	return standalone
}

func sharedCluster() *redistest.Cluster {
	clusterOnce.Do(func() { cluster = redistest.StartCluster(shared) })
	return cluster
}

// startServer starts a server of the test's own, for tests that restart,
// pause or flush it.
func startServer(t testing.TB) *redistest.Server { return redistest.Start(t) }

// backend makes go-redis clients of one kind of deployment; each call is a
// separate client with its own connections, as separate processes would be.
type backend struct {
	name     string
	newRedis func(t testing.TB) redis.UniversalClient
}

var backends = []backend{
	{"standalone", func(t testing.TB) redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: sharedStandalone().Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}},
	{"cluster", func(t testing.TB) redis.UniversalClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: sharedCluster().Addrs()})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}},
}

// forEachBackend runs f on a standalone server and on a 3-master cluster.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// newClient makes a dlock Client on its own go-redis client, closed at the
// test's end.
func newClient(t testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var nameSeq atomic.Int64

// lockName is a lock name no other test uses.
func lockName(t testing.TB) string {
	return fmt.Sprintf("%s#%d", strings.ReplaceAll(t.Name(), "/", ":"), nameSeq.Add(1))
}

func lockKey(name string) string {
	lock, _, _ := dlock.KeysOf(dlock.DefaultPrefix, name)
	return lock
}

// ctxFor is a context that fails the test's wait instead of hanging forever
// when something is broken. It is a guard, never a synchronisation.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitDone fails the test when ch is not closed within the guard time.
func waitDone(t testing.TB, ch <-chan struct{}, guard time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("%s did not happen within %v", what, guard)
	}
}

// commandCounter is a go-redis hook counting the commands a client sends,
// but for the INFO memory of the Client's own node check: sent once per
// node in the background from the first use on, it is no call's cost.
type commandCounter struct {
	commands  atomic.Int64
	pipelines atomic.Int64          // round trips that carried several commands
	onReply   func(cmd redis.Cmder) // optional, called after each reply
}

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if notDlocks(cmd) {
			return next(ctx, cmd)
		}
		h.commands.Add(1)
		err := next(ctx, cmd)
		if h.onReply != nil {
			h.onReply(cmd)
		}
		return err
	}
}

// notDlocks reports whether cmd is one a lock's round trips do not count:
// the Client's check of its nodes (INFO memory), run in the background, and
// go-redis's setup of a new connection (HELLO, CLIENT SETINFO, CLIENT
// MAINT_NOTIFICATIONS; dlock sends no CLIENT command), which goes through
// the hooks too: a connection dialled while the node check held the only
// one counted three commands more.
func notDlocks(cmd redis.Cmder) bool {
	args := cmd.Args()
	switch cmd.Name() {
	case "info":
		return len(args) == 2 && args[1] == "memory"
	case "hello", "client":
		return true
	}
	return false
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		counted := 0
		for _, cmd := range cmds {
			if !notDlocks(cmd) {
				counted++
			}
		}
		if counted == 0 {
			return next(ctx, cmds)
		}
		h.commands.Add(int64(counted))
		h.pipelines.Add(1)
		err := next(ctx, cmds)
		if h.onReply != nil {
			for _, cmd := range cmds {
				h.onReply(cmd)
			}
		}
		return err
	}
}

// lockInBackground runs lock (a Lock or RLock method) and then Unlock, and
// reports the first error (nil once it held and released the lock).
func lockInBackground(ctx context.Context, lock func(context.Context) (*dlock.Lease, error)) <-chan error {
	result := make(chan error, 1)
	go func() {
		lease, err := lock(ctx)
		if err == nil {
			err = lease.Unlock(ctx)
		}
		result <- err
	}()
	return result
}

// expectAcquired fails the test unless a lockInBackground reports success
// within the guard time.
func expectAcquired(t testing.TB, result <-chan error, guard time.Duration, failure string) {
	t.Helper()
	select {
	case err := <-result:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(guard):
		t.Fatal(failure)
	}
}

// isReplyOf reports whether cmd ran an acquire script and its reply's first
// element is status: for the go-redis hooks that inject faults into the
// traffic itself (late_test.go). Tests that only need to know what an
// attempt did ask the Client (countAttempts).
func isReplyOf(cmd redis.Cmder, script *redis.Script, status int64) bool {
	c, ok := cmd.(*redis.Cmd)
	if !ok || !runs(cmd, script) {
		return false
	}
	vals, err := scripts.AcquireReply(c)
	return err == nil && len(vals) >= 2 && vals[0] == status
}

// runs reports whether cmd runs script. For fault hooks.
func runs(cmd redis.Cmder, script *redis.Script) bool {
	return scriptRun(cmd) == script
}

// scriptRun is the script cmd runs: by its function (FCALL), its SHA
// (EVALSHA), or its source (EVAL); nil for another command.
func scriptRun(cmd redis.Cmder) *redis.Script {
	args := cmd.Args()
	if len(args) < 2 {
		return nil
	}
	id, _ := args[1].(string)
	switch cmd.Name() {
	case "fcall", "evalsha":
		return scripts.Of(id)
	case "eval":
		sum := sha1.Sum([]byte(id))
		return scripts.Of(hex.EncodeToString(sum[:]))
	}
	return nil
}

// isScriptCall tells a command that calls one of dlock's scripts by its
// name (FCALL, EVALSHA), as dlock sends them.
func isScriptCall(cmd redis.Cmder) bool {
	return (cmd.Name() == "fcall" || cmd.Name() == "evalsha") && scriptRun(cmd) != nil
}

// missingScript tells the reply of a server that did not have the script
// called: it ran nothing, and dlock sends the call again.
func missingScript(reply error) bool {
	return redis.HasErrorPrefix(reply, "NOSCRIPT") || reply != nil && strings.Contains(reply.Error(), "Function not found")
}

// attemptCounter counts a client's acquire attempts by outcome, and says
// when the refused ones, or those of them that registered a waiter, reach a
// number.
type attemptCounter struct {
	acquired   atomic.Int64
	refused    countdown
	registered countdown // refusals that registered a waiter
}

// countdown is a count that closes channels as it reaches their numbers.
type countdown struct {
	atomic.Int64
	mu    sync.Mutex
	waits map[int64][]chan struct{}
}

func (c *countdown) add() {
	n := c.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.waits[n] {
		close(ch)
	}
	delete(c.waits, n)
}

// reach returns a channel closed once the count is n or more.
func (c *countdown) reach(n int64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if c.Load() >= n {
		close(ch)
		return ch
	}
	if c.waits == nil {
		c.waits = make(map[int64][]chan struct{})
	}
	c.waits[n] = append(c.waits[n], ch)
	return ch
}

// countAttempts counts a Client's Mutex attempts. Call it before the
// Client's first use (see dlock.OnAttempt).
func countAttempts(c *dlock.Client) *attemptCounter {
	return countAttemptsOf(c, scripts.MutexAcquire)
}

// countAttemptsOf counts a Client's attempts with an acquire script, as
// the Client tells them: an attempt whose reply is lost (an error) counts
// in none of the outcomes.
func countAttemptsOf(c *dlock.Client, script *redis.Script) *attemptCounter {
	a := &attemptCounter{}
	dlock.OnAttempt(c, func(r dlock.AttemptReport) {
		if r.Script != script || r.Err != nil || len(r.Reply) < 2 {
			return
		}
		switch r.Reply[0] {
		case 1:
			a.acquired.Add(1)
		case 0:
			// Refused first: a test that wakes on a registration then
			// reads the refusals, this one among them.
			a.refused.add()
			if r.Entry != "" {
				a.registered.add()
			}
		}
	})
	return a
}

// failedAttempts counts a Client's Mutex attempts that ended in an error
// (after go-redis's own retries).
func failedAttempts(c *dlock.Client) *countdown {
	failed := &countdown{}
	dlock.OnAttempt(c, func(r dlock.AttemptReport) {
		if r.Script == scripts.MutexAcquire && r.Err != nil {
			failed.add()
		}
	})
	return failed
}

// refusedReach returns a channel closed when n attempts have been refused.
func (a *attemptCounter) refusedReach(n int64) <-chan struct{} { return a.refused.reach(n) }

// registeredReach returns a channel closed when n refused attempts have
// registered a waiter. (A Lock's first try goes before it subscribes and
// does not register; its second does.)
func (a *attemptCounter) registeredReach(n int64) <-chan struct{} { return a.registered.reach(n) }

// eventually polls cond until it holds, failing the test when ctx ends. It
// is for conditions only observable by asking (a server's counters, state
// inside go-redis), never where a channel could say when.
func eventually(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not happen", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// expectSecondUnlockRefused takes a lock, releases it, and fails the test
// unless releasing it again is refused with ErrNotHeld.
func expectSecondUnlockRefused(t testing.TB, ctx context.Context, lock func(context.Context) (*dlock.Lease, error)) {
	t.Helper()
	lease, err := lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v; want ErrNotHeld", err)
	}
}

// runWorkers runs body for workers goroutines at once and fails the test
// with the errors they return. Each gets a context that fails its wait
// instead of hanging should the locks under test deadlock.
func runWorkers(t testing.TB, workers int, body func(ctx context.Context, worker int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for worker := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := body(ctxFor(t, 2*time.Minute), worker); err != nil {
				errs <- fmt.Errorf("worker %d: %w", worker, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// dumpKeys is a DUMP of every key of the lock names, by key.
func dumpKeys(t *testing.T, ctx context.Context, rdb redis.UniversalClient, names []string) map[string]string {
	t.Helper()
	dump := map[string]string{}
	for _, name := range names {
		for _, k := range keysOn(t, ctx, rdb, "*{"+name+"}*") {
			dump[k] = rdb.Dump(ctx, k).Val()
		}
	}
	return dump
}

// keysOn lists the keys matching pattern, on every master of a cluster.
func keysOn(t testing.TB, ctx context.Context, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var all []string
		err := cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			keys, err := node.Keys(ctx, pattern).Result()
			mu.Lock()
			all = append(all, keys...)
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// renewalsSeen is an option that tells a Client's renewals, answered, on
// the channel it returns (the latest 64 when nobody reads them).
func renewalsSeen() (<-chan observe.RenewalEvent, dlock.Option) {
	renewals := make(chan observe.RenewalEvent, 64)
	return renewals, dlock.WithObserver(&observe.Observer{Renewal: func(ev observe.RenewalEvent) {
		select {
		case renewals <- ev:
		default:
		}
	}})
}

// forgetScripts makes the server forget dlock's scripts, as a restart
// without its data or a failover to a node that never had them would: both
// those cached for EVALSHA and the function libraries.
func forgetScripts(ctx context.Context, rdb redis.Cmdable) error {
	return errors.Join(rdb.ScriptFlush(ctx).Err(), rdb.FunctionFlush(ctx).Err())
}
