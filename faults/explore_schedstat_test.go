//go:build faults

package faults

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// A server that waits for a CPU answers late, as a starved process does:
// on a machine that soaks more lanes than it has cores, a renewal sent in
// time reaches a server the kernel does not run for a while. The explorer
// measures that wait from the kernel's own account of it: run_delay, the
// second field of /proc/<pid>/schedstat, the time the server's main thread
// (Redis's, which runs every command) spent runnable on a run queue, read
// every schedTick. A server stopped (SIGSTOP) is not runnable, and one
// running a script or waiting behind a proxy is not waiting for a CPU, so
// no fault of a run passes for it: unlike slow round trips, it counts in
// every run. Where /proc/<pid>/schedstat cannot be read (not Linux), the
// measure is empty.

const (
	// schedTick: how often the servers' run-queue wait is read.
	schedTick = 20 * time.Millisecond
	// schedMin: waits shorter than this on average, over a tick, are no
	// stall, however many: a command that meets one is answered a few ms
	// late, far inside a renewal's margin (a third of a TTL). The probe's
	// slack: a wake-up that late is the probe's stall.
	schedMin = probeSlack
)

// runQueueSpan is the stall that a run-queue wait of wait, over waits
// times the server was run, tells of the window (prev, now]: the wait, of
// its length, at the window's end; none when its waits were under
// schedMin on average. The kernel counts a wait when it ends, so a wait
// that began before prev shows in this window whole, and in none before
// it: a reniced server beside a hog waits about 280 ms a time, and the
// window's 20 ms of it would leave the rest unseen. Placed at the
// window's end, the wait is at most a window later than it was.
func runQueueSpan(prev, now time.Time, wait time.Duration, waits int64) (span, bool) {
	if waits < 1 || wait/time.Duration(waits) < schedMin || !now.After(prev) {
		return span{}, false
	}
	return span{now.Add(-wait), now}, true
}

// runDelay reads run_delay and the times run (pcount) from f, an open
// /proc/<pid>/schedstat, from its start: a read of it is the task's
// numbers of now.
func runDelay(f *os.File, buf []byte) (time.Duration, int64, error) {
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, err
	}
	fields := bytes.Fields(buf[:n])
	if len(fields) < 3 {
		return 0, 0, errors.New("schedstat: no run_delay and pcount in " + strconv.Quote(string(buf[:n])))
	}
	ns, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil {
		return 0, 0, err
	}
	runs, err := strconv.ParseInt(string(fields[2]), 10, 64)
	return time.Duration(ns), runs, err
}

// serverStalls are the run-queue waits of a run's servers, one stallLog a
// server, sampled by a goroutine of the run's until close.
type serverStalls struct {
	servers func() []*redistest.Server // the run's, asked at every tick

	mu   sync.Mutex
	logs map[*redistest.Server]*stallLog

	stop, done chan struct{}
}

// schedReading is a server's last reading.
type schedReading struct {
	pid   int
	file  *os.File // its /proc/<pid>/schedstat, kept open: a reading is a pread
	delay time.Duration
	runs  int64 // times the task was run
	at    time.Time
	tick  int // the last tick it was read
}

var schedstatReadable = sync.OnceValue(func() bool {
	_, err := os.ReadFile("/proc/self/schedstat")
	return err == nil
})

// startServerStalls samples the servers' run-queue waits until close; it
// samples nothing where the kernel does not tell them.
func startServerStalls(servers func() []*redistest.Server) *serverStalls {
	s := &serverStalls{servers: servers, logs: map[*redistest.Server]*stallLog{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if !schedstatReadable() {
		close(s.done)
		return s
	}
	go s.sample()
	return s
}

// close stops the sampling; the logs stay.
func (s *serverStalls) close() {
	close(s.stop)
	<-s.done
}

func (s *serverStalls) sample() {
	defer close(s.done)
	readings := map[*redistest.Server]*schedReading{}
	defer func() {
		for _, r := range readings {
			_ = r.file.Close()
		}
	}()
	buf := make([]byte, 128)
	ticker := time.NewTicker(schedTick)
	defer ticker.Stop()
	for tick := 1; ; tick++ {
		s.read(readings, tick, buf)
		select {
		case <-s.stop:
			return
		case <-ticker.C:
		}
	}
}

// read reads each server's run-queue wait, and logs what it waited since
// its last reading. A server's new process (a restart) starts anew; a
// server not running, or gone from the run, is forgotten.
func (s *serverStalls) read(readings map[*redistest.Server]*schedReading, tick int, buf []byte) {
	forget := func(srv *redistest.Server, r *schedReading) {
		_ = r.file.Close()
		delete(readings, srv)
	}
	for _, srv := range s.servers() {
		r := readings[srv]
		if r != nil && r.tick == tick { // listed twice
			continue
		}
		pid := srv.Pid()
		if r != nil && r.pid != pid {
			forget(srv, r)
			r = nil
		}
		if pid == 0 {
			continue
		}
		if r == nil {
			f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/schedstat")
			if err != nil {
				continue
			}
			r = &schedReading{pid: pid, file: f}
			readings[srv] = r
		}
		delay, runs, err := runDelay(r.file, buf)
		now := time.Now()
		if err != nil { // it exited
			forget(srv, r)
			continue
		}
		log := s.logFor(srv)
		if !r.at.IsZero() {
			if sp, ok := runQueueSpan(r.at, now, delay-r.delay, runs-r.runs); ok {
				log.add(sp.from, sp.to)
			}
		}
		r.delay, r.runs, r.at, r.tick = delay, runs, now, tick
	}
	for srv, r := range readings {
		if r.tick != tick {
			forget(srv, r)
		}
	}
}

// logFor is srv's log, made on first use.
func (s *serverStalls) logFor(srv *redistest.Server) *stallLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logs[srv]
	if l == nil {
		l = &stallLog{}
		s.logs[srv] = l
	}
	return l
}

// all is every server's log; none for a nil s.
func (s *serverStalls) all() []*stallLog {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*stallLog, 0, len(s.logs))
	for _, l := range s.logs {
		out = append(out, l)
	}
	return out
}

// runServers is the run's servers of the moment that hold its locks: its
// nodes, the Redlock's masters, a failover run's data nodes running, and a
// cluster failover run's masters as they are at each call (a failover
// changes them). Not a cluster's replicas: a lease lives on its master,
// and a replica's wait would excuse the loss of a lease it never served.
func runServers(env *exploreEnv) func() []*redistest.Server {
	fixed := slices.Clone(env.redlock)
	if env.rlFailover != nil { // node 0's master changes: read below
		fixed = fixed[1:]
	}
	if env.cfail == nil { // a cluster failover run's masters change: read below
		fixed = append(fixed, env.nodes...)
	}
	return func() []*redistest.Server {
		out := slices.Clone(fixed)
		if env.failover != nil {
			_, live := env.failover.current()
			out = append(out, live...)
		}
		if env.rlFailover != nil {
			_, live := env.rlFailover.current()
			out = append(out, live...)
		}
		if env.cfail != nil {
			masters, _ := env.cfail.nodes()
			out = append(out, masters...)
		}
		return out
	}
}
