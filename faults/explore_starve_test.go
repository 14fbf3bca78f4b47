//go:build faults

package faults

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/dlockio/dlock"
)

// A lease is lost when no renewal is confirmed before its deadline. In a
// run whose faults do not reach it, that happens when its renewal is sent
// late (the renewer's goroutine was not run) or answered late (the server
// or the reading goroutine was not run): a starved process, on a machine
// that soaks more lanes than it has cores. The explorer tells that from a
// renewal lost on the way by what it measured of the starvation itself,
// never by the loss: the stalls of its own process (a probe that asks to
// sleep and wakes late), the slow round trips of the lease's process's
// commands that came back (a timed-out one is the loss's symptom, not its
// cause; only in runs with no fault that slows a server), and in every
// run the time each of the run's servers waited on a run queue for a CPU,
// as the kernel counts it (explore_schedstat_test.go), the worst server's.
// A loss with little starvation in its lease's last TTL stays a
// violation.

const (
	// probeTick is how long the probe asks to sleep; a wake-up later than
	// probeSlack past it is a stall of the explorer's process.
	probeTick  = 2 * time.Millisecond
	probeSlack = 5 * time.Millisecond
	// slowRoundTrip: a command answered later than this on loopback, with
	// no fault of the run on it, waited for a CPU.
	slowRoundTrip = 20 * time.Millisecond
	// stallKept: spans older than this can no longer explain a run's loss
	// (a run lasts 90 s at most).
	stallKept = 3 * time.Minute
)

// span is a stretch of time.
type span struct{ from, to time.Time }

// stallLog is a record of stretches of starvation.
type stallLog struct {
	mu    sync.Mutex
	spans []span // in the order they ended
}

func (l *stallLog) add(from, to time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := to.Add(-stallKept)
	i := 0
	for i < len(l.spans) && l.spans[i].to.Before(keep) {
		i++
	}
	l.spans = append(l.spans[i:], span{from, to})
}

// clipped is the log's spans that fall in [from, to], cut to it. A span
// shorter than probeSlack holds nothing up past a renewal's margin, and
// many of them do not add up to one that does: it counts for nothing.
func (l *stallLog) clipped(from, to time.Time) []span {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []span
	for _, s := range l.spans {
		if s.to.Sub(s.from) >= probeSlack && s.to.After(from) && s.from.Before(to) {
			out = append(out, span{later(s.from, from), earlier(s.to, to)})
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// starvedFor is how much of [from, to] the logs together cover.
func starvedFor(from, to time.Time, logs ...*stallLog) time.Duration {
	var all []span
	for _, l := range logs {
		all = append(all, l.clipped(from, to)...)
	}
	var total time.Duration
	for _, e := range episodes(all) {
		total += e.to.Sub(e.from)
	}
	return total
}

// episodes are spans merged where they overlap, in order.
func episodes(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			out[n-1].to = later(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// starvedEnough: starvation of a quarter of a TTL within its last TTL is
// more than a renewal sent every third of it, with two thirds of margin,
// survives on a machine run at several times its cores, and more than a
// process that nothing starves ever sees. Below it, a loss is dlock's.
func starvedEnough(starved, ttl time.Duration) bool { return starved >= ttl/4 }

var (
	probeOnce sync.Once
	machine   *stallLog // the explorer process's own stalls, from its first run on
	netProbe  *stallLog // the network probe's (explore_netprobe_test.go)
)

// processStalls starts the probes once, the sleeping one and the
// network's, and returns the sleeping one's log.
func processStalls() *stallLog {
	probeOnce.Do(func() {
		machine, netProbe = &stallLog{}, &stallLog{}
		startNetProbe(netProbe)
		go func() {
			for {
				asked := time.Now()
				time.Sleep(probeTick)
				if woke := time.Now(); woke.Sub(asked) > probeTick+probeSlack {
					machine.add(asked.Add(probeTick), woke)
				}
			}
		}()
	})
	return machine
}

// roundTrip records a command's round trip, from sending to its reply, if
// it was slow and came back.
func (l *stallLog) roundTrip(sent time.Time, err error) {
	if took := time.Since(sent); took >= slowRoundTrip && !isTimeout(err) {
		l.add(sent, sent.Add(took))
	}
}

// starved is how much of [from, to] the process was starved: its commands
// slow, or the explorer's own process stalled, together with the run-queue
// wait of its run's worst server there (explore_schedstat_test.go). The
// worst, not all: a lease lives on one node, and a wait of each server
// in turn would add up to a starvation no lease saw. Only the commands
// answered by to count: a reply that came after it, as a lost renewal's
// own, is the loss's symptom, as a timed-out one is. The network probe
// counts by its longest stall, not their sum (longestStall).
func (p *process) starved(from, to time.Time) time.Duration {
	logs := []*stallLog{processStalls()}
	if p.slowIsStarved {
		logs = append(logs, p.hook.slow.endedBy(to))
		for _, h := range p.nodeHooks {
			logs = append(logs, h.slow.endedBy(to))
		}
	}
	worst := starvedFor(from, to, logs...)
	for _, server := range p.servers.all() {
		worst = max(worst, starvedFor(from, to, append(logs[:len(logs):len(logs)], server)...))
	}
	return max(worst, longestStall(from, to, netProbe))
}

// endedBy is a copy of the log with only its spans that ended by to.
func (l *stallLog) endedBy(to time.Time) *stallLog {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := &stallLog{}
	for _, s := range l.spans {
		if !s.to.After(to) {
			out.spans = append(out.spans, s)
		}
	}
	return out
}

// longestStall is a log's longest stall in [from, to] (the network
// probe's, the goroutines' waits), its overlapping spans merged: a
// reply's reader is held up by one long wait, and a probe read a few ms
// late every 2 ms, which holds no reply up past its margin, logs spans
// that together cover the window (the adversarial review's: steady 6 ms
// wake-ups read as 100% starved).
func longestStall(from, to time.Time, log *stallLog) time.Duration {
	var longest time.Duration
	for _, e := range episodes(log.clipped(from, to)) {
		longest = max(longest, e.to.Sub(e.from))
	}
	return longest
}

// starvedBefore is how much of the ttl before returned, when a call
// returned a lease, its process was starved while it was not suspended:
// once resumed, dlock judges what it returns by both clocks, so the
// suspension is dlock's to see, and stalls measured while it lasted (the
// machine's) explain nothing of it. A call that returned while its
// process was still suspended was judged as the suspension began.
func (p *process) starvedBefore(returned time.Time, ttl time.Duration) time.Duration {
	from, to := returned.Add(-ttl), returned
	if st := p.suspended; st != nil {
		select {
		case <-st.began:
			if st.at.Before(to) {
				select {
				case <-st.resumed:
					if end := st.at.Add(st.length); !end.After(to) {
						from = later(from, end)
					} else {
						to = st.at
					}
				default:
					to = st.at
				}
			}
		default:
		}
	}
	if !from.Before(to) {
		return 0
	}
	return p.starved(from, to)
}

// slowsServers: a fault that slows a server, or the way to one, so that a
// slow round trip in its run need not be starvation.
func slowsServers(fault string) bool {
	switch fault {
	case "pause", "scriptflush", "flushall", "restart", "migrate", "network", "evict", "failover", "cfailover", "ctakeover":
		return true
	}
	return false
}

// heldTTL is the TTL a lease of o counts on from its grant: its lease
// time, if it has one, whatever its TTL (dlock's holdTTL).
func heldTTL(o op) time.Duration {
	if o.Lease > 0 {
		return o.Lease
	}
	return o.TTL
}

// extendedTTL is the TTL a lease of ttl counts on after an Extend to to
// that returned err: to, once confirmed; failed, to if shorter (dlock
// counts on the shorter TTL an Extend in doubt may have set), or ttl.
func extendedTTL(ttl, to time.Duration, err error) time.Duration {
	if err == nil {
		return to
	}
	return min(ttl, to)
}

// starvable: h's loss may be its process's starvation. Redis keeps a hold
// at least until its lease's deadline (a TTL from when its last renewal
// arrived, the deadline a TTL less the drift from when it was sent), and
// dlock reads no renewal's answer much past the deadline, so a loss Redis
// told (the hold expired or taken), seen before the deadline, is dlock's
// or a fault's. A loss at the deadline (unreachable: no renewal confirmed
// in time), or one seen only past it, may be starvation.
func (h hold) starvable() bool {
	return errors.Is(h.loss, dlock.LossUnreachable) || !h.lossSeen.Before(h.deadline)
}

// sawLoss notes when the holder first saw its lease lost.
func (h *hold) sawLoss(lease interface{ Err() error }) {
	if h.lossSeen.IsZero() && lease.Err() != nil {
		h.lossSeen = time.Now()
	}
}
