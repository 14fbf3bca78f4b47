//go:build faults

package faults

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestThreadStalls_SeeAThreadWaitingForACPU: a thread of the explorer's
// process, pinned to one CPU beside a process that spins on it and run at
// niceness 19, waits on the run queue for most of the time it takes to
// run 20 ms of its own work, and the threads' sampler sees at least half
// of that wait.
func TestThreadStalls_SeeAThreadWaitingForACPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc/self/task: the kernel tells no thread's run-queue wait here")
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("no taskset to pin the thread and the hog to one CPU")
	}
	log := threadStalls()
	hog := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done")
	hog.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hog.Process.Kill()
		_ = hog.Wait()
	})

	type starved struct {
		began, ended time.Time
		waited       time.Duration
		err          error
	}
	done := make(chan starved, 1)
	go func() {
		// Locked, and never unlocked: the thread ends with the goroutine,
		// its niceness and CPU with it.
		runtime.LockOSThread()
		tid := syscall.Gettid()
		if out, err := exec.Command(taskset, "-p", "-c", "0", strconv.Itoa(tid)).CombinedOutput(); err != nil {
			done <- starved{err: fmt.Errorf("pinning the thread: %v: %s", err, out)}
			return
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, 19); err != nil {
			done <- starved{err: err}
			return
		}
		stat, err := os.Open("/proc/self/task/" + strconv.Itoa(tid) + "/schedstat")
		if err != nil {
			done <- starved{err: err}
			return
		}
		defer stat.Close()
		buf := make([]byte, 128)
		cpu := func() time.Duration { // the thread's own CPU time, the first field
			n, _ := stat.ReadAt(buf, 0)
			for i := 0; i < n; i++ {
				if buf[i] == ' ' {
					ns, _ := strconv.ParseInt(string(buf[:i]), 10, 64)
					return time.Duration(ns)
				}
			}
			return 0
		}
		waitedBefore, _, _ := runDelay(stat, buf)
		began := time.Now()
		for start := cpu(); cpu()-start < 20*time.Millisecond; {
		}
		ended := time.Now()
		waitedAfter, _, err := runDelay(stat, buf)
		done <- starved{began, ended, waitedAfter - waitedBefore, err}
	}()
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	window := s.ended.Sub(s.began)
	// The sampler's next reading, a tick away, has the wait that ended
	// last; it may run late on a loaded machine.
	deadline := time.Now().Add(5 * time.Second)
	for starvedFor(s.began, s.ended, log) < window/2 && time.Now().Before(deadline) {
		time.Sleep(schedTick)
	}
	seen := starvedFor(s.began, s.ended, log)
	t.Logf("20 ms of work took %v; the kernel's run-queue wait over it %v; the sampler's stalls in it %v",
		window.Round(time.Millisecond), s.waited.Round(time.Millisecond), seen.Round(time.Millisecond))
	if seen < window/2 {
		t.Errorf("the threads' sampler saw %v of run-queue wait in %v, want half at least (the kernel counted %v)", seen, window, s.waited)
	}
}
