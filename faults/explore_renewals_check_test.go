//go:build faults

package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// TestLeaseRenewals_TellHowALeaseRanOut: a lease renewed twice, then its
// hold flushed away, is told as two renewals confirmed with their
// margins and one refused, each timed from the deadline given, and its
// commands' trace has them and the acquisition.
func TestLeaseRenewals_TellHowALeaseRanOut(t *testing.T) {
	srv := startServer(t)
	renewed := newLeaseRenewals()
	told := make(chan dlock.RenewalEvent, 16)
	observer := &dlock.Observer{Renewal: func(ev dlock.RenewalEvent) {
		renewed.observe(ev)
		told <- ev
	}}
	rdb := newRedisAt(srv.Addr())
	t.Cleanup(func() { _ = rdb.Close() })
	trace := newCommandTrace()
	rdb.AddHook(trace)
	client := newClient(t, rdb, dlock.WithTTL(300*time.Millisecond), dlock.WithObserver(observer))
	ctx := ctxFor(t, 30*time.Second)
	name := lockName(t)
	lease, err := client.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	for oks := 0; oks < 2; {
		if ev := <-told; ev.Result == dlock.RenewalOK {
			oks++
		}
	}
	if err := srv.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	<-lease.Done()
	// The refusal is told after Done closes, before the lease's End.
	for refused := false; !refused; {
		select {
		case ev := <-told:
			refused = ev.Result == dlock.RenewalRefused
		case <-ctx.Done():
			t.Fatal("the lease ended, and no refused renewal was told")
		}
	}
	got := renewed.before(map[string]uint64{name: lease.Token()}, acquired, time.Now())
	t.Log(got)
	if !strings.HasPrefix(got, "acquired -") || strings.Count(got, " ok (margin ") < 2 || !strings.Contains(got, " refused") {
		t.Errorf("renewals told as %q, want the acquisition before the deadline, two confirmed with margins, one refused", got)
	}
	// The acquisition and three renewals, each sent and answered.
	if cmds := trace.about([]string{name}, acquired.Add(-time.Second), time.Now()); strings.Count(cmds, "fcall dlock:{"+name+"}") < 4 || strings.Count(cmds, " answered ") < 4 {
		t.Errorf("the lease's commands told as %q, want its acquisition and three renewals, each sent and answered", cmds)
	}
	if none := trace.about([]string{name + "-not"}, acquired.Add(-time.Second), time.Now()); none != " none" {
		t.Errorf("another lock's commands told as %q, want none", none)
	}
	if pool := poolWaits(rdb); !strings.Contains(pool, " 0 waits for one") {
		t.Errorf("pool told as %q, want no command that waited for a connection", pool)
	}
	if none := renewed.before(map[string]uint64{name: lease.Token() + 1}, acquired, time.Now()); !strings.Contains(none, "none told") {
		t.Errorf("another lease's renewals told as %q, want none", none)
	}
}
