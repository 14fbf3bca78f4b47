package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/observe"
)

// recorder is an Observer that writes down every event, one line each,
// and wakes whoever waits for a line.
type recorder struct {
	mu     sync.Mutex
	lines  []string
	events []any
	added  chan struct{} // closed and replaced on each event
}

func newRecorder() *recorder { return &recorder{added: make(chan struct{})} }

func (r *recorder) add(ev any, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
	r.events = append(r.events, ev)
	close(r.added)
	r.added = make(chan struct{})
}

type ctxMark struct{}

func (r *recorder) observer() *observe.Observer {
	return &observe.Observer{
		Acquire: func(ctx context.Context, call observe.AcquireCall) (context.Context, func(observe.AcquireDone)) {
			r.add(call, "acquire %s try=%v", call.Kind, call.Try)
			ctx = context.WithValue(ctx, ctxMark{}, call.Name)
			return ctx, func(d observe.AcquireDone) {
				r.add(d, "done %s waited=%v token>0=%v", d.Outcome, d.Waited, d.Token > 0)
			}
		},
		Wait: func(ctx context.Context, ev observe.WaitEvent) {
			// The wait runs in the context Acquire returned.
			marked := ctx.Value(ctxMark{}) == ev.Name
			r.add(ev, "wait %s %s marked=%v", ev.Kind, ev.Step, marked)
		},
		Release: func(ctx context.Context, l observe.LeaseInfo) (context.Context, func(error)) {
			r.add(l, "release %s", l.Kind)
			return ctx, func(err error) { r.add(err, "released err=%v", err) }
		},
		Renewal: func(ev observe.RenewalEvent) {
			r.add(ev, "renewal %s %s margin>0=%v", ev.Kind, ev.Result, ev.Margin > 0)
		},
		Extend: func(ev observe.ExtendEvent) { r.add(ev, "extend %s %s", ev.Kind, ev.Result) },
		End: func(ev observe.LeaseEnd) {
			r.add(ev, "end %s lost=%q held>0=%v", ev.Kind, string(ev.Lost), ev.Held > 0)
		},
		Leader: func(ev observe.LeaderEvent) { r.add(ev, "leader leading=%v term>0=%v", ev.Leading, ev.Term > 0) },
	}
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// waitFor blocks until a line starting with prefix was recorded, failing
// the test after the guard time; it returns the event of that line.
func (r *recorder) waitFor(t *testing.T, prefix string, guard time.Duration) any {
	t.Helper()
	deadline := time.After(guard)
	for {
		r.mu.Lock()
		for i, line := range r.lines {
			if strings.HasPrefix(line, prefix) {
				ev := r.events[i]
				r.mu.Unlock()
				return ev
			}
		}
		added := r.added
		r.mu.Unlock()
		select {
		case <-added:
		case <-deadline:
			t.Fatalf("no event %q within %v; got %q", prefix, guard, r.snapshot())
		}
	}
}

func equalLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestObserver_LockUnlockIsOneAcquireAndOneRelease(t *testing.T) {
	rec := newRecorder()
	c := newClient(t, sharedStandalone().Client(), dlock.WithObserver(rec.observer()))
	ctx := ctxFor(t, 10*time.Second)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	equalLines(t, rec.snapshot(), []string{
		"acquire mutex try=false",
		"done acquired waited=false token>0=true",
		"release mutex",
		`end mutex lost="" held>0=true`,
		"released err=<nil>",
	})
	if end := rec.events[3].(observe.LeaseEnd); end.Token != lease.Token() || end.Name != lease.Name() {
		t.Fatalf("end of %+v, want the lease's name and token %d", end, lease.Token())
	}
}

func TestObserver_RefusedTryLockIsNotAcquired(t *testing.T) {
	rec := newRecorder()
	c := newClient(t, sharedStandalone().Client(), dlock.WithObserver(rec.observer()))
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	holder, err := newClient(t, sharedStandalone().Client()).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(ctx)
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock: %v", err)
	}
	if _, err := c.Mutex(name, dlock.WithWait(0)).Lock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Lock with WithWait(0): %v", err)
	}
	equalLines(t, rec.snapshot(), []string{
		"acquire mutex try=true",
		"done not_acquired waited=false token>0=false",
		"acquire mutex try=true",
		"done not_acquired waited=false token>0=false",
	})
}

// A waiter registers, is handed the lock by the holder's release, and the
// wait's events reach the observer in the context its Acquire returned.
func TestObserver_WaiterIsRegisteredThenHandedTheLock(t *testing.T) {
	rec := newRecorder()
	rdb := sharedStandalone().Client()
	c := newClient(t, rdb, dlock.WithObserver(rec.observer()))
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	holder, err := newClient(t, rdb).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lease, err := c.Mutex(name).Lock(ctx)
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- err
	}()
	rec.waitFor(t, "wait mutex registered", 5*time.Second)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	lines := rec.snapshot()
	// Retries before the hand-over depend on timing (a waiter refresh);
	// the story around them does not.
	var story []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "wait mutex retry") {
			story = append(story, l)
		}
	}
	equalLines(t, story, []string{
		"acquire mutex try=false",
		"wait mutex registered marked=true",
		"wait mutex handed_over marked=true",
		"done acquired waited=true token>0=true",
		"release mutex",
		`end mutex lost="" held>0=true`,
		"released err=<nil>",
	})
}

func TestObserver_CancelledWaitIsCanceled(t *testing.T) {
	rec := newRecorder()
	rdb := sharedStandalone().Client()
	c := newClient(t, rdb, dlock.WithObserver(rec.observer()))
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	holder, err := newClient(t, rdb).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(ctx)

	waitCtx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := c.Mutex(name).Lock(waitCtx)
		got <- err
	}()
	rec.waitFor(t, "wait mutex registered", 5*time.Second)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock: %v", err)
	}
	done := rec.waitFor(t, "done", time.Second).(observe.AcquireDone)
	if done.Outcome != observe.OutcomeCanceled || !done.Waited || done.Err == nil {
		t.Fatalf("done: %+v", done)
	}

	// A wait whose WithWait runs out found the lock busy: not acquired.
	rec2 := newRecorder()
	_, err = c.Mutex(name, dlock.WithObserver(rec2.observer()), dlock.WithWait(50*time.Millisecond)).Lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v", err)
	}
	if done := rec2.waitFor(t, "done", time.Second).(observe.AcquireDone); done.Outcome != observe.OutcomeNotAcquired {
		t.Fatalf("done after WithWait ran out: %+v", done)
	}
}

// Renewals report their margin: the time the lease had left when Redis
// confirmed them, about two thirds of the TTL on a healthy link.
func TestObserver_RenewalsReportTheirMargin(t *testing.T) {
	rec := newRecorder()
	const ttl = 300 * time.Millisecond
	c := newClient(t, sharedStandalone().Client(), dlock.WithObserver(rec.observer()), dlock.WithTTL(ttl))
	ctx := ctxFor(t, 10*time.Second)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev := rec.waitFor(t, "renewal mutex ok", 5*time.Second).(observe.RenewalEvent)
	if ev.Margin <= 0 || ev.Margin >= ttl || ev.Token != lease.Token() {
		t.Fatalf("renewal %+v: want a margin in (0, %v) and the lease's token %d", ev, ttl, lease.Token())
	}
	if err := lease.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := rec.waitFor(t, "extend mutex ok", time.Second).(observe.ExtendEvent); ev.TTL != time.Second {
		t.Fatalf("extend: %+v", ev)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock removed behind the holder's back: the next renewal is refused and
// the lease ends lost, before Done closes.
func TestObserver_RefusedRenewalEndsTheLeaseLost(t *testing.T) {
	rec := newRecorder()
	c := newClient(t, sharedStandalone().Client(), dlock.WithObserver(rec.observer()), dlock.WithTTL(300*time.Millisecond))
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(ctx, name); err != nil {
		t.Fatal(err)
	}
	waitDone(t, lease.Done(), 5*time.Second, "the loss")
	rec.waitFor(t, "end", time.Second) // told after Done closes
	lines := rec.snapshot()
	equalLines(t, lines[len(lines)-2:], []string{
		"renewal mutex refused margin>0=false",
		`end mutex lost="forced" held>0=true`,
	})
	if end := rec.events[len(lines)-1].(observe.LeaseEnd); !errors.Is(end.Err, dlock.ErrLeaseLost) {
		t.Fatalf("end: %+v", end)
	}
}

// A fixed lease that runs out unextended ends lost, expired.
func TestObserver_FixedLeaseRunsOutExpired(t *testing.T) {
	rec := newRecorder()
	c := newClient(t, sharedStandalone().Client(), dlock.WithObserver(rec.observer()))
	ctx := ctxFor(t, 10*time.Second)
	lease, err := c.Mutex(lockName(t), dlock.WithLeaseTime(150*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, lease.Done(), 5*time.Second, "the lease's end")
	if end := rec.waitFor(t, "end", time.Second).(observe.LeaseEnd); end.Lost != dlock.LossExpired {
		t.Fatalf("end: %+v", end)
	}
}

// A server that stops answering: renewals fail, and the lease ends lost,
// unreachable, at its deadline.
func TestObserver_UnansweredRenewalsEndTheLeaseUnreachable(t *testing.T) {
	srv := startServer(t)
	rec := newRecorder()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb, dlock.WithObserver(rec.observer()), dlock.WithTTL(300*time.Millisecond))
	ctx := ctxFor(t, 10*time.Second)
	lease, err := c.Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	waitDone(t, lease.Done(), 5*time.Second, "the loss")
	rec.waitFor(t, "renewal mutex failed", time.Second)
	if end := rec.waitFor(t, "end", time.Second).(observe.LeaseEnd); end.Lost != dlock.LossUnreachable {
		t.Fatalf("end: %+v", end)
	}
}

// Each type reports its own kind, and a lease's events name the lock as
// the lease does.
func TestObserver_EveryTypeReportsItsKind(t *testing.T) {
	rec := newRecorder()
	rdb := sharedStandalone().Client()
	c := newClient(t, rdb, dlock.WithObserver(rec.observer()))
	ctx := ctxFor(t, 20*time.Second)
	name := lockName(t)
	masters := []redis.UniversalClient{rdb, startServer(t).Client(), startServer(t).Client()}
	redlock := mustRedlock(t, masters, dlock.WithObserver(rec.observer()), dlock.WithRestartGuard(0))
	for _, k := range family.All {
		before := len(rec.snapshot())
		lease, err := k.Take(ctx, family.Target{Client: c, Redlock: redlock, Value: "me"}, namesOf(k, name+":"+string(k.Kind)), false)
		if err != nil {
			t.Fatalf("%s: %v", k.Kind, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("%s: unlock: %v", k.Kind, err)
		}
		rec.mu.Lock()
		events := rec.events[before:]
		rec.mu.Unlock()
		for _, ev := range events {
			var kind observe.Kind
			var evName string
			switch ev := ev.(type) {
			case observe.AcquireCall:
				kind, evName = ev.Kind, ev.Name
			case observe.LeaseInfo:
				kind, evName = ev.Kind, ev.Name
			case observe.LeaseEnd:
				kind, evName = ev.Kind, ev.Name
			default:
				continue
			}
			if kind != k.Kind || evName != lease.Name() {
				t.Errorf("%s: event %+v, want kind %s and name %q", k.Kind, ev, k.Kind, lease.Name())
			}
		}
	}
	var leaders []string
	for _, l := range rec.snapshot() {
		if strings.HasPrefix(l, "leader") {
			leaders = append(leaders, l)
		}
	}
	equalLines(t, leaders, []string{"leader leading=true term>0=true", "leader leading=false term>0=true"})
}

// No event carries an owner token: the secret a lock's key holds.
func TestObserver_EventsNeverCarryTheOwnerToken(t *testing.T) {
	rec := newRecorder()
	rdb := sharedStandalone().Client()
	c := newClient(t, rdb, dlock.WithObserver(rec.observer()), dlock.WithTTL(300*time.Millisecond))
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := rdb.Get(ctx, lockKey(name)).Result()
	if err != nil || owner == "" {
		t.Fatalf("reading the owner token: %q, %v", owner, err)
	}
	rec.waitFor(t, "renewal", 5*time.Second)
	if err := lease.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, ev := range rec.events {
		if text := fmt.Sprintf("%+v %#v", ev, ev); strings.Contains(text, owner) {
			t.Fatalf("event %s shows the owner token", text)
		}
	}
}

// A MultiLock over several cluster slots holds a lease per slot under one
// lease: the parts report their renewals, and the whole lease alone its
// acquire, release and end.
func TestObserver_MultiLockAcrossSlotsIsOneLease(t *testing.T) {
	rec := newRecorder()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: sharedCluster().Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb, dlock.WithObserver(rec.observer()), dlock.WithTTL(300*time.Millisecond))
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	names := []string{name + ":a", name + ":b", name + ":c", name + ":d"}
	slots := map[int]bool{}
	for _, n := range names {
		slots[dlock.ClusterSlot(n)] = true
	}
	if len(slots) < 2 {
		t.Fatalf("names %q share one slot", names)
	}
	lease, err := c.MultiLock(names).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renewal := rec.waitFor(t, "renewal multi ok", 5*time.Second).(observe.RenewalEvent)
	if renewal.Name == lease.Name() {
		t.Fatalf("renewal of %q: want one part's names", renewal.Name)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var story []string
	for _, l := range rec.snapshot() {
		if !strings.HasPrefix(l, "renewal") {
			story = append(story, l)
		}
	}
	equalLines(t, story, []string{
		"acquire multi try=false",
		"done acquired waited=false token>0=true",
		"release multi",
		`end multi lost="" held>0=true`,
		"released err=<nil>",
	})
}

// An Observer hook that panics while the call holds a lease it has not yet
// returned (Acquire's done, a Wait of the hand-over, Election's Leader),
// or before a release was sent (Release), on a caller that recovers (as
// net/http does per request), leaves no hold behind: the lease is released
// before the panic goes on, not renewed for ever with nobody to unlock it.
func TestObserver_PanickingHookLeavesNoHold(t *testing.T) {
	rdb := backends[0].newRedis(t)
	for _, hook := range []string{"done", "handed over", "release", "registered"} {
		t.Run(hook, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			name := lockName(t)
			o := &observe.Observer{}
			registered := make(chan struct{}) // the panicking call waits (handed over)
			switch hook {
			case "done":
				o.Acquire = func(ctx context.Context, _ observe.AcquireCall) (context.Context, func(observe.AcquireDone)) {
					return ctx, func(observe.AcquireDone) { panic("observer broke") }
				}
			case "handed over":
				o.Wait = func(_ context.Context, ev observe.WaitEvent) {
					switch ev.Step {
					case observe.WaitRegistered:
						close(registered)
					case observe.WaitHandedOver:
						panic("observer broke")
					}
				}
			case "release":
				o.Release = func(context.Context, observe.LeaseInfo) (context.Context, func(error)) { panic("observer broke") }
			case "registered": // no lease yet, but a registration a release would hand the lock to
				o.Wait = func(_ context.Context, ev observe.WaitEvent) {
					if ev.Step == observe.WaitRegistered {
						panic("observer broke")
					}
				}
			}
			c := newClient(t, rdb, dlock.WithObserver(o))
			var blocker *dlock.Lease
			if hook == "handed over" || hook == "registered" { // the panicking call waits
				var err error
				if blocker, err = newClient(t, rdb).Mutex(name).Lock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			panicked := make(chan any, 1)
			go func() {
				defer func() { panicked <- recover() }()
				l, err := c.Mutex(name).Lock(ctx)
				if err == nil && hook == "release" {
					_ = l.Unlock(ctx)
				}
			}()
			if hook == "handed over" {
				waitDone(t, registered, 10*time.Second, "the waiter registering")
				if err := blocker.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if r := <-panicked; r == nil {
				t.Fatal("the observer's panic did not reach the caller")
			}
			if hook == "registered" {
				if n := rdb.ZCard(ctx, lockKey(name)+":waiters").Val(); n != 0 {
					t.Fatalf("the panicking waiter left %d registrations, which the release would hand the lock to", n)
				}
				if err := blocker.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// With the hold released, another client takes the lock at
			// once; a hold left behind is renewed and never lets it.
			free, err := newClient(t, rdb).Mutex(name, dlock.WithWait(3*time.Second)).Lock(ctx)
			if err != nil {
				t.Fatalf("after the panic the lock stays held: %v", err)
			}
			_ = free.Unlock(ctx)
		})
	}
}

// An Observer whose End blocks (an exporter stuck on the network) must not
// keep a lost lease's holder from learning of the loss: Done closes first.
func TestObserver_BlockingEndDoesNotDelayTheLoss(t *testing.T) {
	release := make(chan struct{})
	o := &observe.Observer{End: func(observe.LeaseEnd) { <-release }}
	c := newClient(t, sharedStandalone().Client(), dlock.WithObserver(o), dlock.WithTTL(300*time.Millisecond))
	t.Cleanup(func() { close(release) }) // before the Client's Close, which waits for its renewals
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(ctx, name); err != nil {
		t.Fatal(err)
	}
	waitDone(t, lease.Done(), 5*time.Second, "the loss reaching Done while End blocks")
}

// A Renewal hook that blocks (an exporter stuck on the network) costs no
// lease its renewal: neither the others renewed in its batch nor its own.
// Each renewal confirmed is told from later batches while it blocks.
func TestObserver_BlockingRenewalHookCostsNoLeaseItsRenewal(t *testing.T) {
	const leases = 100
	blocked, release, renewed, lost := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan observe.LeaseEnd, leases)
	var (
		first     sync.Once
		mu        sync.Mutex
		confirmed = map[uint64]int{} // renewals told confirmed, by token, while the first hook blocks
		twice     int                // leases confirmed twice
	)
	o := &observe.Observer{
		Renewal: func(ev observe.RenewalEvent) {
			isFirst := false
			first.Do(func() { isFirst = true })
			if isFirst {
				close(blocked)
				<-release
				return
			}
			if ev.Result != observe.RenewalOK {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if confirmed[ev.Token]++; confirmed[ev.Token] == 2 {
				if twice++; twice == leases {
					close(renewed)
				}
			}
		},
		End: func(ev observe.LeaseEnd) { lost <- ev },
	}
	c := newClient(t, sharedStandalone().Client(), dlock.WithObserver(o), dlock.WithTTL(time.Second))
	t.Cleanup(func() { close(release) }) // before the Client's Close, which waits for its renewals
	ctx := ctxFor(t, time.Minute)
	for range leases {
		if _, err := c.Mutex(lockName(t)).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitDone(t, blocked, 10*time.Second, "the first renewal's hook")
	select {
	case <-renewed:
	case ev := <-lost:
		t.Fatalf("a lease was lost while a Renewal hook blocked: %+v", ev)
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("while a Renewal hook blocked, %d of %d leases were renewed twice", twice, leases)
	}
}
