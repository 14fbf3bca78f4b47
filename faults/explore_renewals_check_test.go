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
// margins and one refused, each timed from the deadline given.
func TestLeaseRenewals_TellHowALeaseRanOut(t *testing.T) {
	srv := startServer(t)
	renewed := newLeaseRenewals()
	told := make(chan dlock.RenewalEvent, 16)
	observer := &dlock.Observer{Renewal: func(ev dlock.RenewalEvent) {
		renewed.observe(ev)
		told <- ev
	}}
	client := newClient(t, srv.Client(), dlock.WithTTL(300*time.Millisecond), dlock.WithObserver(observer))
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
	got := renewed.before(map[string]uint64{name: lease.Token()}, acquired, time.Now())
	t.Log(got)
	if !strings.HasPrefix(got, "acquired -") || strings.Count(got, " ok (margin ") < 2 || !strings.Contains(got, " refused") {
		t.Errorf("renewals told as %q, want the acquisition before the deadline, two confirmed with margins, one refused", got)
	}
	if none := renewed.before(map[string]uint64{name: lease.Token() + 1}, acquired, time.Now()); !strings.Contains(none, "none told") {
		t.Errorf("another lease's renewals told as %q, want none", none)
	}
}
