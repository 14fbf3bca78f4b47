package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hangingFS mounts a FUSE file system that answers the kernel's INIT and
// nothing else until release: a process that looks up a path in it waits
// for an answer, and once killed waits on uninterruptibly (D). asked is
// closed once the first question is read. It needs root; the test is
// skipped without.
func hangingFS(t *testing.T) (dir string, asked <-chan struct{}, release func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a FUSE file system needs root")
	}
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skip("no /dev/fuse:", err)
	}
	dir = filepath.Join(t.TempDir(), "hang")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("dlock-test", dir, "fuse", syscall.MS_NOSUID|syscall.MS_NODEV,
		fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)); err != nil {
		syscall.Close(fd)
		t.Skip("mounting a FUSE file system:", err)
	}
	// Unmounted, the file system ends the reader's read (ENODEV).
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	var mu sync.Mutex
	var unanswered [][]byte // the questions' ids
	questions := make(chan struct{})
	go func() {
		defer syscall.Close(fd)
		const opForget, opInit, opInterrupt, opBatchForget = 2, 26, 36, 42 // <linux/fuse.h>
		buf := make([]byte, 1<<20)
		for {
			n, err := syscall.Read(fd, buf)
			if err != nil {
				return
			}
			if n < 40 {
				continue
			}
			switch binary.LittleEndian.Uint32(buf[4:]) {
			case opInit:
				// fuse_out_header, then fuse_init_out: version 7.31, no
				// flags, writes of 4096 bytes.
				reply := make([]byte, 16+64)
				binary.LittleEndian.PutUint32(reply[0:], uint32(len(reply)))
				copy(reply[8:16], buf[8:16])
				binary.LittleEndian.PutUint32(reply[16:], 7)
				binary.LittleEndian.PutUint32(reply[20:], 31)
				binary.LittleEndian.PutUint32(reply[36:], 4096)
				_, _ = syscall.Write(fd, reply)
			case opForget, opInterrupt, opBatchForget:
			default:
				mu.Lock()
				unanswered = append(unanswered, append([]byte(nil), buf[8:16]...))
				if len(unanswered) == 1 {
					close(questions)
				}
				mu.Unlock()
			}
		}
	}()
	release = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range unanswered {
			reply := make([]byte, 16) // fuse_out_header: ENOENT
			binary.LittleEndian.PutUint32(reply[0:], 16)
			binary.LittleEndian.PutUint32(reply[4:], uint32(1<<32-int(syscall.ENOENT)))
			copy(reply[8:], id)
			_, _ = syscall.Write(fd, reply)
		}
		unanswered = nil
	}
	t.Cleanup(release)
	return dir, questions, release
}

// cpuTicks is the CPU time process pid has used, in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	user, _ := strconv.Atoi(fields[11])
	system, _ := strconv.Atoi(fields[12])
	return user + system
}

// Issue 36: a process of the command that a kill cannot end at once (in
// uninterruptible sleep, D, here on a file system that does not answer)
// does not make dlock or the guard spin killing it: killed once, it is
// waited for, and ends the run when it dies.
func TestRun_AKilledProcessThatCannotDieYetCostsNoCPU(t *testing.T) {
	for _, how := range []string{"kill -9 of dlock", "a loss"} {
		t.Run(how, func(t *testing.T) {
			dir, asked, release := hangingFS(t)
			url, _ := testRedis(t)
			ready := fifo(t, "ready")
			p := startDlock(t, url, "", "run", "--ttl", "1s", "hang", "--",
				"sh", "-c", `stat "$2" >/dev/null 2>&1 & echo $! > "$1"; wait`, "sh", ready, filepath.Join(dir, "x"))
			hung := readPid(t, ready)
			guard := parentOf(parentOf(hung))
			select {
			case <-asked:
			case <-time.After(15 * time.Second):
				t.Fatal("the file system was asked nothing")
			}
			// The guard kills when dlock dies; on a loss, dlock kills, the
			// guard too.
			killer := guard
			if how == "kill -9 of dlock" {
				if err := p.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			} else {
				killer = p.cmd.Process.Pid
				forceUnlock(t, url, "hang")
			}
			waitFor(t, 10*time.Second, "the killed process sleeps uninterruptibly (D)", func() bool { return state(hung) == "D" })
			used := cpuTicks(t, killer)
			for until := time.Now().Add(2 * time.Second); time.Now().Before(until); {
				time.Sleep(10 * time.Millisecond)
			}
			// 2 s is 200 ticks; killing once and waiting costs none.
			spent := cpuTicks(t, killer) - used
			t.Logf("the killer used %d ticks of CPU in 2 s", spent)
			if spent > 10 {
				t.Errorf("the killer (pid %d) used %d ticks of CPU in 2 s while a process it killed could not die", killer, spent)
			}
			if how == "a loss" && len(p.exited) > 0 {
				t.Fatalf("dlock exited before a process it killed ended\nstderr: %s", &p.stderr)
			}
			release()
			waitGone(t, hung, 10*time.Second, "the killed process, its file system closed,")
			waitGone(t, guard, 10*time.Second, "the guard, once every process of the command has ended,")
			if code := p.wait(t, 15*time.Second); how == "a loss" && code != exitLost {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
			}
		})
	}
}
