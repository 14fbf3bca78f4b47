//go:build faults

package faults

import (
	"os"
	"sync"
	"time"
)

// The probe (explore_starve_test.go) is one goroutine: woken on whichever
// of the Go scheduler's threads is free, it does not see a thread the
// kernel has not run for a while, nor the goroutine stuck on it, which
// may be a renewer. The kernel counts each thread's run-queue wait, as it
// does a server's (explore_schedstat_test.go): the explorer reads its own
// threads' every schedTick. Any thread's wait is not a renewer's, so it
// explains no loss; an unexplained loss reports it, to tell a starved
// machine from a renewal lost on the way.

var (
	threadsOnce sync.Once
	threads     *stallLog // the explorer process's threads' run-queue waits, from its first run on
)

// threadStalls starts the sampler once, and returns its log: empty where
// /proc/self/task cannot be read (not Linux).
func threadStalls() *stallLog {
	threadsOnce.Do(func() {
		threads = &stallLog{}
		go sampleThreads(threads)
	})
	return threads
}

// threadReading is a thread's last reading.
type threadReading struct {
	file  *os.File
	delay time.Duration
	runs  int64
	at    time.Time
}

// sampleThreads logs, every schedTick, each thread's run-queue wait since
// its last reading; a thread gone is forgotten.
func sampleThreads(log *stallLog) {
	readings := map[string]*threadReading{}
	buf := make([]byte, 128)
	ticker := time.NewTicker(schedTick)
	defer ticker.Stop()
	for {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		listed := make(map[string]bool, len(tasks))
		for _, task := range tasks {
			tid := task.Name()
			listed[tid] = true
			r := readings[tid]
			if r == nil {
				f, err := os.Open("/proc/self/task/" + tid + "/schedstat")
				if err != nil {
					continue
				}
				r = &threadReading{file: f}
				readings[tid] = r
			}
			delay, runs, err := runDelay(r.file, buf)
			now := time.Now()
			if err != nil { // it exited
				_ = r.file.Close()
				delete(readings, tid)
				continue
			}
			if !r.at.IsZero() {
				if sp, ok := runQueueSpan(r.at, now, delay-r.delay, runs-r.runs); ok {
					log.add(sp.from, sp.to)
				}
			}
			r.delay, r.runs, r.at = delay, runs, now
		}
		for tid, r := range readings {
			if !listed[tid] {
				_ = r.file.Close()
				delete(readings, tid)
			}
		}
		<-ticker.C
	}
}
