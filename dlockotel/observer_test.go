package dlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlockotel"
	"github.com/dlockio/dlock/observe"
)

func TestLockUnlock_AcquireHoldHeldAndSpans(t *testing.T) {
	tel := newTelemetry(t)
	ctx := ctxFor(t, 10*time.Second)
	lease, err := tel.client(t).Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acquired := []attribute.KeyValue{kindMutex, attribute.String("dlock.outcome", "acquired")}
	if n, sum := tel.histogram(t, "dlock.acquire.duration", acquired...); n != 1 || sum <= 0 {
		t.Fatalf("dlock.acquire.duration{acquired}: %d, sum %v; want 1 > 0", n, sum)
	}
	if n := tel.sum(t, "dlock.held", kindMutex); n != 1 {
		t.Fatalf("dlock.held while held: %d, want 1", n)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := tel.sum(t, "dlock.held", kindMutex); n != 0 {
		t.Fatalf("dlock.held after unlock: %d, want 0", n)
	}
	if n, _ := tel.histogram(t, "dlock.hold.duration", kindMutex, attribute.String("dlock.release.reason", "released")); n != 1 {
		t.Fatalf("dlock.hold.duration{released}: %d, want 1", n)
	}
	for name, want := range map[string]string{
		"dlock.acquire.duration": "s", "dlock.hold.duration": "s", "dlock.held": "{lease}",
	} {
		if got := tel.unit(t, name); got != want {
			t.Errorf("unit of %s: %q, want %q", name, got, want)
		}
	}

	acquire := tel.span(t, "dlock.acquire")
	for key, want := range map[attribute.Key]attribute.Value{
		"dlock.kind":          attribute.StringValue("mutex"),
		"dlock.outcome":       attribute.StringValue("acquired"),
		"dlock.try":           attribute.BoolValue(false),
		"dlock.waited":        attribute.BoolValue(false),
		"dlock.fencing_token": attribute.Int64Value(int64(lease.Token())),
	} {
		if got, _ := attr(acquire, key); got != want {
			t.Errorf("dlock.acquire's %s: %v, want %v", key, got.Emit(), want.Emit())
		}
	}
	release := tel.span(t, "dlock.release")
	if got, _ := attr(release, "dlock.fencing_token"); got.AsInt64() != int64(lease.Token()) {
		t.Errorf("dlock.release's token: %v, want %d", got.Emit(), lease.Token())
	}
	if release.Status().Code == codes.Error {
		t.Errorf("dlock.release failed: %+v", release.Status())
	}
}

// A waiter of this process is counted while it waits, its span tells of
// its registration and of being handed the lock, and the hand-over from a
// release of this process is measured.
func TestWaiter_WaitingHandOverAndSpanEvents(t *testing.T) {
	tel := newTelemetry(t)
	registered := make(chan struct{})
	wait := tel.obs.Wait
	tel.obs.Wait = func(ctx context.Context, ev observe.WaitEvent) {
		wait(ctx, ev)
		if ev.Step == observe.WaitRegistered {
			close(registered)
		}
	}
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	holder, err := tel.client(t).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		lease, err := tel.client(t).Mutex(name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	waitFor(t, registered, 5*time.Second, "the waiter's registration")
	if n := tel.sum(t, "dlock.waiting", kindMutex); n != 1 {
		t.Fatalf("dlock.waiting while waiting: %d, want 1", n)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	defer lease.Unlock(ctx)
	if n := tel.sum(t, "dlock.waiting", kindMutex); n != 0 {
		t.Fatalf("dlock.waiting after the wait: %d, want 0", n)
	}
	if n, sum := tel.histogram(t, "dlock.handover.duration", kindMutex); n != 1 || sum <= 0 {
		t.Fatalf("dlock.handover.duration: %d, sum %v; want 1 > 0", n, sum)
	}
	var waited string
	for _, s := range tel.spans.Ended() {
		if v, _ := attr(s, "dlock.waited"); s.Name() == "dlock.acquire" && v.AsBool() {
			waited = eventNames(s)
		}
	}
	waited = strings.ReplaceAll(waited, " dlock.wait.retry", "") // a waiter refresh may come first
	if waited != "dlock.wait.registered dlock.wait.handed_over" {
		t.Fatalf("the waiter's span events: %q", waited)
	}
}

func TestOutcomes_NotAcquiredCanceledAndError(t *testing.T) {
	tel := newTelemetry(t)
	c := tel.client(t)
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	other, err := dlock.New(sharedRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	holder, err := other.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(ctx)

	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Mutex(name).Lock(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock: %v", err)
	}
	foreign := lockName(t)
	if err := sharedRedis(t).Set(ctx, dlock.DefaultPrefix+"{"+foreign+"}", "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex(foreign).TryLock(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("TryLock on a foreign key: %v", err)
	}

	for _, want := range [][]attribute.KeyValue{
		{attribute.String("dlock.outcome", "not_acquired")},
		{attribute.String("dlock.outcome", "canceled")},
		{attribute.String("dlock.outcome", "error"), attribute.String("error.type", "wrong_type")},
	} {
		if n, _ := tel.histogram(t, "dlock.acquire.duration", append(want, kindMutex)...); n != 1 {
			t.Errorf("dlock.acquire.duration%v: %d, want 1", want, n)
		}
	}
	errored := 0
	for _, s := range tel.spans.Ended() {
		if s.Status().Code == codes.Error {
			errored++
			if v, _ := attr(s, "dlock.outcome"); v.AsString() != "error" {
				t.Errorf("span %s failed with outcome %v", s.Name(), v.Emit())
			}
		}
	}
	if errored != 1 {
		t.Fatalf("%d failed spans, want the wrong-type one", errored)
	}
}

// Renewals are counted by result, their margin recorded; extensions too.
func TestRenewals_CountedWithTheirMargin(t *testing.T) {
	tel := newTelemetry(t)
	var renewed <-chan struct{}
	tel.obs.Renewal, renewed = signal(tel.obs.Renewal, func(ev observe.RenewalEvent) bool { return ev.Result == observe.RenewalOK })
	const ttl = 300 * time.Millisecond
	ctx := ctxFor(t, 10*time.Second)
	lease, err := tel.client(t, dlock.WithTTL(ttl)).Mutex(lockName(t)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	waitFor(t, renewed, 5*time.Second, "a renewal")
	ok := attribute.String("dlock.renewal.result", "ok")
	if n := tel.sum(t, "dlock.lease.renewals", kindMutex, ok); n < 1 {
		t.Fatalf("dlock.lease.renewals{ok}: %d, want at least 1", n)
	}
	n, sum := tel.histogram(t, "dlock.lease.margin", kindMutex)
	if n < 1 || sum <= 0 || sum/float64(n) >= ttl.Seconds() {
		t.Fatalf("dlock.lease.margin: %d, sum %v; want margins in (0, %v)", n, sum, ttl)
	}
	if err := lease.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := tel.sum(t, "dlock.lease.extensions", kindMutex, attribute.String("dlock.extension.result", "ok")); n != 1 {
		t.Fatalf("dlock.lease.extensions{ok}: %d, want 1", n)
	}
}

// A lock removed by force behind its holder's back: the renewal is
// refused, the lease counted lost (forced), its hold ended lost, and it is
// no longer held.
func TestLostLease_RefusedRenewalLostAndHoldEnded(t *testing.T) {
	tel := newTelemetry(t)
	c := tel.client(t, dlock.WithTTL(300*time.Millisecond))
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	lease, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(ctx, name); err != nil {
		t.Fatal(err)
	}
	waitFor(t, lease.Done(), 5*time.Second, "the loss")
	tel.waitLoss(t)
	if n := tel.sum(t, "dlock.lease.renewals", kindMutex, attribute.String("dlock.renewal.result", "refused")); n != 1 {
		t.Errorf("dlock.lease.renewals{refused}: %d, want 1", n)
	}
	if n := tel.sum(t, "dlock.lease.lost", kindMutex, attribute.String("dlock.loss.reason", "forced")); n != 1 {
		t.Errorf("dlock.lease.lost{forced}: %d, want 1", n)
	}
	if n, _ := tel.histogram(t, "dlock.hold.duration", kindMutex, attribute.String("dlock.release.reason", "lost_forced")); n != 1 {
		t.Errorf("dlock.hold.duration{lost_forced}: %d, want 1", n)
	}
	if n := tel.sum(t, "dlock.held", kindMutex); n != 0 {
		t.Errorf("dlock.held after the loss: %d, want 0", n)
	}

	// A fixed lease that runs out is lost, expired.
	fixed, err := c.Mutex(lockName(t), dlock.WithLeaseTime(150*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, fixed.Done(), 5*time.Second, "the fixed lease's end")
	tel.waitLoss(t)
	if n := tel.sum(t, "dlock.lease.lost", kindMutex, attribute.String("dlock.loss.reason", "expired")); n != 1 {
		t.Errorf("dlock.lease.lost{expired}: %d, want 1", n)
	}
}

func TestElection_LeaderUpAndDown(t *testing.T) {
	tel := newTelemetry(t)
	ctx := ctxFor(t, 10*time.Second)
	e := tel.client(t).Election(lockName(t))
	if _, err := e.Campaign(ctx, "me"); err != nil {
		t.Fatal(err)
	}
	if n := tel.sum(t, "dlock.election.leader"); n != 1 {
		t.Fatalf("dlock.election.leader while leading: %d, want 1", n)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if n := tel.sum(t, "dlock.election.leader"); n != 0 {
		t.Fatalf("dlock.election.leader after resigning: %d, want 0", n)
	}
	if n, _ := tel.histogram(t, "dlock.acquire.duration", attribute.String("dlock.kind", "election")); n != 1 {
		t.Fatalf("dlock.acquire.duration{election}: %d, want 1", n)
	}
}

// Lock names are no attribute by default; WithLockGroup maps them to one.
func TestLockNames_OnlyAsGroups(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	name := "orders:" + lockName(t)
	run := func(tel *telemetry) {
		lease, err := tel.client(t).Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	plain := newTelemetry(t)
	run(plain)
	for _, text := range everything(t, plain) {
		if strings.Contains(text, name) {
			t.Errorf("the lock's name is in %s", text)
		}
	}

	grouped := newTelemetry(t, dlockotel.WithLockGroup(func(name string) string {
		group, _, _ := strings.Cut(name, ":")
		return group
	}))
	run(grouped)
	orders := attribute.String("dlock.lock.group", "orders")
	if n, _ := grouped.histogram(t, "dlock.acquire.duration", orders); n != 1 {
		t.Errorf("dlock.acquire.duration{group orders}: %d, want 1", n)
	}
	if n, _ := grouped.histogram(t, "dlock.hold.duration", orders); n != 1 {
		t.Errorf("dlock.hold.duration{group orders}: %d, want 1", n)
	}
	if v, _ := attr(grouped.span(t, "dlock.acquire"), "dlock.lock.group"); v.AsString() != "orders" {
		t.Errorf("dlock.acquire's group: %v", v.Emit())
	}
}

// The owner token, the secret a lock's key holds, is never recorded.
func TestOwnerToken_NeverRecorded(t *testing.T) {
	tel := newTelemetry(t)
	var renewed <-chan struct{}
	tel.obs.Renewal, renewed = signal(tel.obs.Renewal, func(ev observe.RenewalEvent) bool { return true })
	ctx := ctxFor(t, 10*time.Second)
	name := lockName(t)
	lease, err := tel.client(t, dlock.WithTTL(300*time.Millisecond)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := sharedRedis(t).Get(ctx, dlock.DefaultPrefix+"{"+name+"}").Result()
	if err != nil || owner == "" {
		t.Fatalf("reading the owner token: %q, %v", owner, err)
	}
	waitFor(t, renewed, 5*time.Second, "a renewal")
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, text := range everything(t, tel) {
		if strings.Contains(text, owner) {
			t.Fatalf("the owner token is in %s", text)
		}
	}
}

// everything is every attribute, span and event tel recorded, as text.
func everything(t *testing.T, tel *telemetry) []string {
	var all []string
	for _, sm := range tel.collect(t).ScopeMetrics {
		for _, m := range sm.Metrics {
			all = append(all, fmt.Sprintf("metric %s: %+v", m.Name, m.Data))
		}
	}
	for _, s := range tel.spans.Ended() {
		all = append(all, fmt.Sprintf("span %s: %+v %+v %+v", s.Name(), s.Attributes(), s.Events(), s.Status()))
	}
	return all
}
