//go:build faults

package faults

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRunQueueSpan_TheWaitAtTheWindowsEnd: a window's run-queue wait is a
// stall of its length at the window's end, one that began before the
// window was read whole, and none when its waits were under schedMin on
// average.
func TestRunQueueSpan_TheWaitAtTheWindowsEnd(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		prev, now int
		wait      time.Duration
		waits     int64
		want      *span
	}{
		{0, 20, 5 * time.Millisecond, 1, &span{at(15), at(20)}},
		{0, 20, schedMin, 1, &span{at(15), at(20)}},
		{0, 20, 12 * time.Millisecond, 2, &span{at(8), at(20)}},
		{0, 20, 20 * time.Millisecond, 1, &span{at(0), at(20)}},
		{0, 20, 50 * time.Millisecond, 1, &span{at(-30), at(20)}},   // a wait that began before the window was read
		{0, 20, 280 * time.Millisecond, 1, &span{at(-260), at(20)}}, // a reniced server's, beside a hog
		{0, 20, 16 * time.Millisecond, 4, nil},                      // four waits of 4 ms: no command was held up past its margin
		{0, 20, schedMin - time.Microsecond, 1, nil},
		{0, 20, 5 * time.Millisecond, 0, nil},
		{0, 20, 0, 0, nil},
		{20, 20, 5 * time.Millisecond, 1, nil},
	} {
		got, ok := runQueueSpan(at(c.prev), at(c.now), c.wait, c.waits)
		switch {
		case c.want == nil && ok:
			t.Errorf("[%d ms, %d ms] waiting %v in %d: span %v, want none", c.prev, c.now, c.wait, c.waits, got)
		case c.want != nil && (!ok || !got.from.Equal(c.want.from) || !got.to.Equal(c.want.to)):
			t.Errorf("[%d ms, %d ms] waiting %v in %d: span [%v, %v] (%v), want [%v, %v]", c.prev, c.now, c.wait, c.waits,
				got.from.Sub(t0), got.to.Sub(t0), ok, c.want.from.Sub(t0), c.want.to.Sub(t0))
		}
	}
}

// TestStarved_TheWorstServerNotTheirSum: a process is as starved as its
// own stalls with its worst server's: a lease lives on one node, and
// stalls of two servers in turn do not add up.
func TestStarved_TheWorstServerNotTheirSum(t *testing.T) {
	t0 := time.Now().Add(time.Hour) // where the probe has measured nothing
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a, b := new(redistest.Server), new(redistest.Server)
	stalls := &serverStalls{logs: map[*redistest.Server]*stallLog{}}
	stalls.logFor(a).add(at(0), at(300))
	stalls.logFor(b).add(at(500), at(800))
	for _, slowIsStarved := range []bool{true, false} {
		p := &process{hook: newCommandFaults(1, 0, nil, nil), servers: stalls, slowIsStarved: slowIsStarved}
		p.hook.slow.add(at(250), at(350))
		want := 300 * time.Millisecond // b's, or a's
		if slowIsStarved {
			want = 400 * time.Millisecond // the slow round trip with b's (with a's: 350 ms)
		}
		if got := p.starved(at(0), at(1000)); got != want {
			t.Errorf("slow round trips counted %v: starved %v, want %v", slowIsStarved, got, want)
		}
	}
	if got, want := (&process{hook: newCommandFaults(1, 0, nil, nil)}).starved(at(0), at(1000)), time.Duration(0); got != want {
		t.Errorf("no servers measured: starved %v, want %v", got, want)
	}
}

// TestRunServers_EveryServerOfTheRun: the sampler of a run watches its
// nodes, the Redlock's masters, a failover's data nodes running and a
// cluster failover's masters, as they are at each tick; never a cluster's
// replicas, which serve no lease.
func TestRunServers_EveryServerOfTheRun(t *testing.T) {
	srv := func() *redistest.Server { return new(redistest.Server) }
	node, replica, master := srv(), srv(), srv()
	env := &exploreEnv{nodes: []*redistest.Server{node}, replicas: []*redistest.Server{replica}, redlock: []*redistest.Server{master}}
	if got, want := runServers(env)(), []*redistest.Server{node, master}; !sameServers(got, want) {
		t.Errorf("standalone run: %d servers listed, want %d", len(got), len(want))
	}
	promoted := srv()
	env = &exploreEnv{nodes: []*redistest.Server{node}, failover: &failoverEnv{live: []*redistest.Server{node, promoted}}}
	servers := runServers(env)
	if got, want := servers(), []*redistest.Server{node, promoted}; !sameServers(got, want) {
		t.Errorf("failover run: %d servers, want %d", len(got), len(want))
	}
	rejoined := srv()
	env.failover.live = []*redistest.Server{promoted, rejoined}
	if got, want := servers(), []*redistest.Server{node, promoted, rejoined}; !sameServers(got, want) {
		t.Errorf("failover run after a failover: %d servers, want %d (its live nodes of now)", len(got), len(want))
	}
	c := &redistest.Cluster{Nodes: []*redistest.Server{node}, Replicas: []*redistest.Server{replica}}
	env = &exploreEnv{nodes: []*redistest.Server{node}, replicas: []*redistest.Server{replica}, cfail: newClusterFailovers(c)}
	servers = runServers(env)
	promoted = srv()
	c.Nodes = []*redistest.Server{promoted} // the replica promoted, the old master its replica
	c.Replicas = []*redistest.Server{node}
	if got, want := servers(), []*redistest.Server{promoted}; !sameServers(got, want) {
		t.Errorf("cluster failover run: %d servers, want %d (its masters of now)", len(got), len(want))
	}
}

// sameServers: got lists want's servers, some maybe twice (the sampler
// reads each once a tick), and no other.
func sameServers(got, want []*redistest.Server) bool {
	for _, g := range got {
		if !slices.Contains(want, g) {
			return false
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// TestServerStalls_SeeAServerWaitingForACPU: a server pinned to one CPU
// with a process that spins on it, and run at niceness 19 (the hog gets
// about 98% of the CPU), kept busy by a script of about 100 ms of its CPU,
// waits on the run queue for most of the script's time, much of it in long
// waits (the sampler counts a tick's waits when they average schedMin or
// more), and the sampler sees at least half of it. Sharing the CPU at one
// niceness, a server waits in slices of a few ms, which hold a quick
// command up no more than that: no stall.
func TestServerStalls_SeeAServerWaitingForACPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skip("no /proc/self/schedstat: the kernel tells no run-queue wait here")
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("no taskset to pin the server and the hog to one CPU")
	}
	srv := startServer(t)
	stalls := startServerStalls(func() []*redistest.Server { return []*redistest.Server{srv} })
	t.Cleanup(stalls.close)
	ctx := context.Background()

	// A Lua loop of n steps; n for about 100 ms, timed on the server alone.
	const loop = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"
	const calibrate = 2_000_000
	began := time.Now()
	if err := srv.Client().Eval(ctx, loop, nil, calibrate).Err(); err != nil {
		t.Fatal(err)
	}
	steps := int(float64(calibrate) * float64(100*time.Millisecond) / float64(max(time.Since(began), time.Millisecond)))
	steps = min(steps, 500_000_000)

	if out, err := exec.Command(taskset, "-a", "-p", "-c", "0", strconv.Itoa(srv.Pid())).CombinedOutput(); err != nil {
		t.Fatalf("pinning the server: %v: %s", err, out)
	}
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, srv.Pid(), 19); err != nil { // its main thread, which runs scripts
		t.Fatalf("renicing the server: %v", err)
	}
	hog := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done")
	hog.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hog.Process.Kill()
		_ = hog.Wait()
	})

	before, _ := readRunDelay(srv.Pid())
	type busy struct {
		sent, answered time.Time
		err            error
	}
	// At niceness 19 beside the hog the script takes seconds: no read
	// timeout, and no retry, whose copy would find the server BUSY with
	// the first.
	slow := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { _ = slow.Close() })
	done := make(chan busy, 1)
	go func() {
		sent := time.Now()
		err := slow.Eval(ctx, loop, nil, steps).Err()
		done <- busy{sent, time.Now(), err}
	}()
	b := <-done
	if b.err != nil {
		t.Fatal(b.err)
	}
	after, _ := readRunDelay(srv.Pid())
	window := b.answered.Sub(b.sent)
	// The sampler's next reading, a tick away, has the wait that ended
	// with the script; it may run late on a loaded machine.
	deadline := time.Now().Add(5 * time.Second)
	for starvedFor(b.sent, b.answered, stalls.logFor(srv)) < window/2 && time.Now().Before(deadline) {
		time.Sleep(schedTick)
	}
	seen := starvedFor(b.sent, b.answered, stalls.logFor(srv))
	t.Logf("script of %d steps busy %v; the kernel's run-queue wait over it %v; the sampler's stalls in it %v",
		steps, window.Round(time.Millisecond), (after - before).Round(time.Millisecond), seen.Round(time.Millisecond))
	// The kernel runs the reniced server a few ms every 250-300 ms on this
	// VM (kernel 6.18): long waits, which the sampler sees whole, 92-98% of
	// the window. Half is what it must see; one that took a wait for the
	// one tick it ended in saw 7-9%, and one that logged nothing, or took
	// every tick for short waits, sees none.
	if seen < window/2 {
		t.Errorf("the sampler saw %v of run-queue wait in a %v busy window, want half at least (the kernel counted %v)", seen, window, after-before)
	}
}

// readRunDelay is pid's run-queue wait so far.
func readRunDelay(pid int) (time.Duration, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	delay, _, err := runDelay(f, make([]byte, 128))
	return delay, err
}
