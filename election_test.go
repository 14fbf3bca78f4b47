package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/check"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/scripts"
)

// elected is a candidate that became leader, and its process's Client.
type elected struct {
	candidate int
	lease     *dlock.Lease
	client    *dlock.Client
}

// leaderships checks that at most one candidate believes it leads: when a
// Campaign returns, every earlier leadership's lease must already report
// its end (or have been resigned: a leader stops acting before it resigns).
type leaderships struct {
	mu       sync.Mutex
	leases   []*dlock.Lease
	resigned map[*dlock.Lease]bool
	overlaps int
	terms    check.Fenced // tokens strictly increasing
}

func (s *leaderships) elected(candidate int, l *dlock.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, old := range s.leases {
		if !s.resigned[old] && old.Err() == nil {
			s.overlaps++
		}
	}
	s.leases = append(s.leases, l)
	s.terms.Enter(candidate, l.Token(), time.Time{})
	s.terms.Exit(candidate)
}

func (s *leaderships) resign(l *dlock.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resigned == nil {
		s.resigned = make(map[*dlock.Lease]bool)
	}
	s.resigned[l] = true
}

func TestElection_OneLeaderAtATimeThroughCrashesAndResignations(t *testing.T) {
	const candidates, rounds = 5, 8
	const ttl = 500 * time.Millisecond
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithCancel(ctxFor(t, 2*time.Minute))
		var running sync.WaitGroup
		defer running.Wait()
		defer cancel()
		name := lockName(t)

		var leaders leaderships
		wins := make(chan elected)
		campaign := func(i int) {
			// Each candidate is a process of its own: its own connections,
			// renewals and subscriber, all of which a crash stops.
			c, err := dlock.New(b.newRedis(t), dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			running.Add(1)
			go func() {
				defer running.Done()
				lease, err := c.Election(name).Campaign(ctx, fmt.Sprint("candidate-", i))
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("candidate %d: %v", i, err)
					}
					_ = c.Close()
					return
				}
				leaders.elected(i, lease)
				select {
				case wins <- elected{candidate: i, lease: lease, client: c}:
				case <-ctx.Done():
					_ = c.Close()
				}
			}()
		}
		nextLeader := func(what string) elected {
			t.Helper()
			select {
			case leader := <-wins:
				return leader
			case <-time.After(time.Minute):
				t.Fatalf("no leader within a minute %s", what)
				return elected{}
			}
		}

		// A first leader, seen by the observer: from here it is subscribed.
		campaign(0)
		leader := nextLeader("at the start")
		observed := newClient(t, b.newRedis(t)).Election(name).Observe(ctx)
		if first := <-observed; first.Term != leader.lease.Token() || first.Value != "candidate-0" {
			t.Fatalf("observer's first leader %+v; want term %d of candidate-0", first, leader.lease.Token())
		}
		for i := 1; i < candidates; i++ {
			campaign(i)
		}

		terms := []uint64{leader.lease.Token()}
		var takeovers [2][]time.Duration // after a crash, after a resignation
		for round := range rounds {
			ended := time.Now()
			if round%2 == 0 {
				// A crash: the leader's process stops; nothing resigns, and
				// its lease reports the loss at its deadline.
				_ = leader.client.Close()
			} else {
				leaders.resign(leader.lease)
				if err := leader.lease.Unlock(ctx); err != nil {
					t.Fatalf("round %d: resign: %v", round, err)
				}
				_ = leader.client.Close()
			}
			campaign(leader.candidate) // it stands again, as a new process
			leader = nextLeader(fmt.Sprintf("after round %d", round))
			// The bound is the crashed leader's TTL; the margin is for a
			// loaded machine.
			took := time.Since(ended)
			if took > ttl+5*time.Second {
				t.Fatalf("round %d: a new leader took %v, the TTL is %v", round, took, ttl)
			}
			takeovers[round%2] = append(takeovers[round%2], took.Round(time.Millisecond))
			terms = append(terms, leader.lease.Token())
		}
		_ = leader.client.Close()
		t.Logf("new leader after a crash (TTL %v): %v; after a resignation: %v", ttl, takeovers[0], takeovers[1])
		if got := leaders.terms.Result(); leaders.overlaps != 0 || got.Stale != 0 {
			t.Fatalf("%d leaders elected while an earlier one still led; %d terms not above the last", leaders.overlaps, got.Stale)
		}

		seen := []uint64{terms[0]}
		for l := range observed {
			if l.Term != seen[len(seen)-1] {
				seen = append(seen, l.Term)
			}
			if l.Term >= terms[len(terms)-1] {
				break
			}
		}
		if !slices.Equal(seen, terms) {
			t.Fatalf("observer saw terms %v; the leaders had %v", seen, terms)
		}
	})
}

func TestElection_ResignHandsOverAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		// Neither the TTL nor the waiting candidate's refresh ends within
		// the guard: only the resignation's wake-up can elect it.
		first := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute)).Election(name)
		if _, err := first.Campaign(ctx, "first"); err != nil {
			t.Fatal(err)
		}
		candidate := newClient(t, b.newRedis(t), dlock.WithTTL(time.Minute), dlock.WithWaiterRefresh(time.Hour))
		l, second := resignToWaiting(t, ctx, first, candidate, name, 20*time.Second)
		if leader, err := second.Leader(ctx); err != nil || leader != (dlock.Leader{Value: "second", Term: l.Token()}) {
			t.Fatalf("leader after the hand-over: %+v, %v", leader, err)
		}
		if err := first.Resign(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("resigning twice: %v; want ErrNotHeld", err)
		}
	})
}

func TestElection_LeaderProclaimAndObserve(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxFor(t, time.Minute)
		name := lockName(t)
		c := newClient(t, b.newRedis(t))
		e := c.Election(name)
		if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
			t.Fatalf("Leader before any campaign: %v; want ErrNoLeader", err)
		}
		if err := e.Proclaim(ctx, "x"); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Proclaim by a candidate that does not lead: %v; want ErrNotHeld", err)
		}
		lease, err := e.Campaign(ctx, "10.0.0.1:8080")
		if err != nil {
			t.Fatal(err)
		}
		observed := c.Election(name).Observe(ctx)
		if l := <-observed; l != (dlock.Leader{Value: "10.0.0.1:8080", Term: lease.Token()}) {
			t.Fatalf("observed %+v", l)
		}
		if err := e.Proclaim(ctx, "10.0.0.2:8080"); err != nil {
			t.Fatal(err)
		}
		if l := <-observed; l != (dlock.Leader{Value: "10.0.0.2:8080", Term: lease.Token()}) {
			t.Fatalf("observed after Proclaim %+v", l)
		}
		if l, err := e.Leader(ctx); err != nil || l.Value != "10.0.0.2:8080" {
			t.Fatalf("Leader after Proclaim: %+v, %v", l, err)
		}
		again, err := e.Campaign(ctx, "10.0.0.3:8080")
		if err != nil || again != lease {
			t.Fatalf("Campaign while leading: %v, %v; want the same lease", again, err)
		}
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
			t.Fatalf("Leader after the resignation: %v; want ErrNoLeader", err)
		}
	})
}

func TestElection_BadInput(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	rdb := backends[0].newRedis(t)
	c := newClient(t, rdb)
	for _, e := range []*dlock.Election{c.Election(""), c.Election("x", dlock.WithTTL(0)), (*dlock.Client)(nil).Election("x")} {
		if _, err := e.Campaign(ctx, "v"); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Campaign of %q: %v; want ErrInvalid", e.Name(), err)
		}
		if _, ok := <-e.Observe(ctx); ok {
			t.Errorf("Observe of %q: a leader from a bad handle", e.Name())
		}
	}
	if _, err := c.Election("x").Campaign(ctx, string(make([]byte, dlock.MaxLeaderValueLen+1))); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("an oversized value: %v; want ErrInvalid", err)
	}
	name := lockName(t)
	if err := rdb.HSet(ctx, lockKey(name)+":leader", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, lockKey(name)+":leader", "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Election(name).Campaign(ctx, "v"); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Campaign with a string where the leader hash goes: %v; want ErrWrongType", err)
	}
	if n := rdb.Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Fatal("a failed campaign left a leadership behind")
	}
}

func TestElection_ObserverReadsAgainAfterItsConnectionDrops(t *testing.T) {
	srv := startServer(t)
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	admin := srv.Client()
	candidate := newClient(t, srv.Client()).Election(name)
	if _, err := candidate.Campaign(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	// An hour's TTL: the observer's periodic read (TTL/3) is not what finds
	// the change; the read after reconnecting is.
	observed := newClient(t, srv.Client(), dlock.WithTTL(time.Hour)).Election(name).Observe(ctx)
	if l := <-observed; l.Value != "first" {
		t.Fatalf("observed %+v", l)
	}
	// A change whose message the observer never gets (as one published
	// while its connection is down), then the drop: only the read after
	// reconnecting can find it.
	if err := admin.HSet(ctx, lockKey(name)+":leader", "value", "second").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-observed:
		if l.Value != "second" {
			t.Fatalf("observed %+v after the reconnect; want the changed value", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the observer did not catch up after its connection dropped")
	}
}

// An observer read slowly never shows an older value of a term after a
// newer one. The observer, blocked on its reader, has proclamations
// queued; its periodic read (every TTL/3) may find a newer value than
// those: it must not be followed by them.
func TestElection_SlowObserverSeesATermsValuesInOrder(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)
	c := newClient(t, sharedStandalone().Client(), dlock.WithTTL(dlock.MinTTL))
	leader := c.Election(name)
	if _, err := leader.Campaign(ctx, "0"); err != nil {
		t.Fatal(err)
	}
	observed := c.Election(name).Observe(ctx)
	if l := <-observed; l.Value != "0" {
		t.Fatalf("observed %+v first", l)
	}
	const rounds, perRound = 20, 60 // fewer than go-redis queues (100)
	seen := 0
	for round := range rounds {
		// Not read meanwhile: the observer blocks on its first, the rest
		// queue, and its periodic reads fall due.
		for i := range perRound {
			if err := leader.Proclaim(ctx, strconv.Itoa(round*perRound+i+1)); err != nil {
				t.Fatal(err)
			}
		}
		for last := (round + 1) * perRound; seen != last; {
			l := <-observed
			v, err := strconv.Atoi(l.Value)
			if err != nil || v <= seen {
				t.Fatalf("round %d: observed %q after %d", round, l.Value, seen)
			}
			seen = v
		}
	}
}

// The channels an Election's scripts make (the observers': the leader
// hash's name; the candidates' wake-up: the lock's name and its suffix)
// are those Go listens on: with a custom prefix, names with odd characters,
// the README's ACL user and one without Functions (EVALSHA), an observer
// hears a proclamation and a campaign by PUBLISH (the TTL is too long for
// Observe's rereads), and a resignation wakes the waiting candidate at once.
func TestElection_ChannelsAreThoseGoListensOn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) { probeElection(t, b, dlock.WithPrefix("app: p:")) })
	for _, acl := range []struct {
		name  string
		rules []string
	}{{"acl", redistest.DlockACL}, {"evalsha-acl", redistest.EvalshaACL}} {
		t.Run(acl.name, func(t *testing.T) {
			srv := startServer(t)
			admin := srv.Client()
			n := 0
			probeElection(t, backend{acl.name, func(testing.TB) redis.UniversalClient {
				n++
				return aclUser(t, context.Background(), admin, fmt.Sprint("u", n), acl.rules...)
			}})
			stats := admin.Info(context.Background(), "commandstats").Val()
			if acl.name == "evalsha-acl" && (!strings.Contains(stats, "cmdstat_evalsha:calls=") || regexp.MustCompile(`cmdstat_fcall:calls=[1-9]`).MatchString(stats)) {
				t.Errorf("the user without Functions ran scripts other than by EVALSHA:\n%s", stats)
			}
		})
	}
}

// probeElection runs the check on b's clients.
func probeElection(t *testing.T, b backend, extra ...dlock.Option) {
	for _, name := range []string{lockName(t), "x:wake", "sp ace:", "é\x00z", "a*b?[c]"} {
		ctx := ctxFor(t, time.Minute)
		opts := append([]dlock.Option{dlock.WithTTL(time.Minute), dlock.WithWaiterRefresh(time.Hour)}, extra...)
		first := newClient(t, b.newRedis(t), opts...).Election(name)
		l1, err := first.Campaign(ctx, "first")
		if err != nil {
			t.Fatal(name, err)
		}
		// Observe reads the leader once subscribed: what follows comes by
		// PUBLISH (the TTL is too long for a reread).
		observed := newClient(t, b.newRedis(t), opts...).Election(name).Observe(ctx)
		expect := func(want dlock.Leader, what string) {
			select {
			case got := <-observed:
				if got != want {
					t.Fatalf("%q %s: observed %+v; want %+v", name, what, got, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%q %s: the observer heard nothing", name, what)
			}
		}
		expect(dlock.Leader{Value: "first", Term: l1.Token()}, "first read")
		if err := first.Proclaim(ctx, "first2"); err != nil {
			t.Fatal(err)
		}
		expect(dlock.Leader{Value: "first2", Term: l1.Token()}, "proclaim")
		l, second := resignToWaiting(t, ctx, first, newClient(t, b.newRedis(t), opts...), name, 10*time.Second)
		expect(dlock.Leader{Value: "second", Term: l.Token()}, "hand-over")
		if err := second.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// resignToWaiting has candidate campaign for name as "second" while first
// leads, and first resign once that campaign waits: the lease the
// resignation elects, and the candidate's Election. It fails the test when
// none is elected within.
func resignToWaiting(t *testing.T, ctx context.Context, first *dlock.Election, candidate *dlock.Client, name string, within time.Duration) (*dlock.Lease, *dlock.Election) {
	t.Helper()
	registered := countAttemptsOf(candidate, scripts.ElectionAcquire).registeredReach(1)
	second := candidate.Election(name)
	won := make(chan *dlock.Lease, 1)
	go func() {
		l, err := second.Campaign(ctx, "second")
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	waitDone(t, registered, time.Minute, "the second candidate waiting")
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-won:
		return l, second
	case <-time.After(within):
		t.Fatalf("%q: the resignation did not elect the waiting candidate", name)
		return nil, nil
	}
}
