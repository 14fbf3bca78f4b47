package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// These tests hold `dlock run` to what an adversarial review of the binary
// found (issue 36): output that blocks, processes dlock may not kill, a
// release that fails, a terminal set to stop background writers, a temp
// dir that cannot be written, a process whose main thread has exited.

// nobodyDir is a directory of the test's that user nobody may read, with
// a copy of dlock in it.
func nobodyDir(t *testing.T) (dir, bin string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dlock-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "dlock")
	if out, err := exec.Command("cp", dlockBin, bin).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return dir, bin
}

// Issue 36: a process of the command that dlock may not kill (one that
// became root through a set-user-ID program, as sudo does) is named when
// the lock is lost, and the run exits 76: dlock does not say it killed
// the command. The test runs dlock as user nobody; it needs root.
func TestRun_AProcessDlockMayNotKillIsNamedOnALoss(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running dlock as another user and a set-user-ID program needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv (util-linux): it runs dlock as user nobody")
	}
	url, _ := testRedis(t)
	dir, bin := nobodyDir(t)
	// A set-user-ID copy of setpriv makes user nobody's command root.
	rootpriv := filepath.Join(dir, "rootpriv")
	if out, err := exec.Command("cp", setpriv, rootpriv).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.Chmod(rootpriv, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready")
	if err := syscall.Mkfifo(ready, 0o666); err != nil {
		t.Fatal(err)
	}
	p := startNobody(t, url, "--reuid=nobody", "--regid=nogroup", "--clear-groups", bin, "run", "--ttl", "3s", "other-user", "--",
		"sh", "-c", `"$2" --reuid=0 --regid=0 --clear-groups sh -c 'echo $$ > "$1"; exec sleep 100' sh "$1" >/dev/null 2>&1 & wait`,
		"sh", ready, rootpriv)
	rooted := readPid(t, ready)
	t.Cleanup(func() { _ = syscall.Kill(rooted, syscall.SIGKILL) })
	forceUnlock(t, url, "other-user")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	want := fmt.Sprintf("could not kill %d (sleep)", rooted)
	if got := p.stderr.String(); !strings.Contains(got, want) || strings.Contains(got, "killed the command") {
		t.Fatalf("stderr %q, want %q and not \"killed the command\"", got, want)
	}
}

// startNobody starts setpriv with args, to run dlock as another user.
func startNobody(t *testing.T, url string, args ...string) *dlockProcess {
	t.Helper()
	return startProcess(t, exec.Command("setpriv", args...), url, "")
}

// Issue 36: a loss is said once, as it is: dlock's own kill of the guard
// is not taken for an outside one ("the guard was killed").
func TestRun_ALossIsSaidOnce(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "3s", "said-once", "--",
		"sh", "-c", `echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1`, "sh", ready)
	readPid(t, ready)
	forceUnlock(t, url, "said-once")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `lost the lock "said-once"`) {
		t.Fatalf("stderr %q, want one line saying the lock was lost", &p.stderr)
	}
}

// Issue 36: at the command's end, a release that fails is said, and the
// command's exit code kept; a lock found lost then (forced open between
// renewals) is said too, and the run exits 76: the command ran some time
// without it.
func TestRun_AFailedReleaseIsSaid(t *testing.T) {
	t.Run("Redis gone", func(t *testing.T) {
		srv := redistest.Start(t)
		ready, finish := fifo(t, "ready"), fifo(t, "finish")
		p := startDlock(t, "redis://"+srv.Addr(), "", "run", "--ttl", "60s", "release-fails", "--",
			"sh", "-c", `echo $$ > "$1"; cat "$2" >/dev/null`, "sh", ready, finish)
		readPid(t, ready)
		srv.Kill()
		if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 0 || !strings.Contains(p.stderr.String(), `releasing "release-fails"`) {
			t.Fatalf("exit %d, want 0 and the failed release said\nstderr: %s", code, &p.stderr)
		}
	})
	t.Run("forced open", func(t *testing.T) {
		url, _ := testRedis(t)
		ready, finish := fifo(t, "ready"), fifo(t, "finish")
		p := startDlock(t, url, "", "run", "--ttl", "60s", "forced-at-end", "--",
			"sh", "-c", `echo $$ > "$1"; cat "$2" >/dev/null`, "sh", ready, finish)
		readPid(t, ready)
		forceUnlock(t, url, "forced-at-end")
		if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		want := `dlock run: lost the lock "forced-at-end" before the command ended (it was forced open or deleted before its deadline)` + "\n"
		if code := p.wait(t, 15*time.Second); code != exitLost || p.stderr.String() != want {
			t.Fatalf("exit %d, want %d and the loss said as\n%s\nstderr: %s", code, exitLost, want, &p.stderr)
		}
	})
}

// Issue 36: a run in the background of a terminal set to stop background
// writers (stty tostop) is not stopped by its own line (holding the lock
// for a process left), which would let the lock lapse; the command gets
// SIGTTOU's default all the same (stopped by such writes, as any job).
func TestRun_ATostopTerminalDoesNotStopABackgroundRun(t *testing.T) {
	url, _ := testRedis(t)
	ready, finish, ignored := fifo(t, "ready"), fifo(t, "finish"), filepath.Join(t.TempDir(), "ignored")
	term := startTerminal(t, fmt.Sprintf(`set -m
stty tostop
export REDIS_URL=%s
%s run --ttl 1s tostop-bg -- sh -c 'grep SigIgn /proc/self/status > "$3"; cat "$2" >/dev/null 2>&1 & echo $! > "$1"' sh %s %s %s &
sleep 600
`, url, dlockBin, ready, finish, ignored))
	left := readPid(t, ready)
	term.waitScreen(`holding "tostop-bg"`)
	for until := time.Now().Add(3 * time.Second); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		if gone(left) {
			t.Fatalf("the process left was killed: dlock stopped writing to the terminal\n%s", term.screen())
		}
	}
	data, err := os.ReadFile(ignored)
	mask, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(data), "SigIgn:")), 16, 64)
	if err != nil || mask&(1<<(syscall.SIGTTOU-1)) != 0 {
		t.Fatalf("the command ignores SIGTTOU (%q, %v)", data, err)
	}
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Issue 36: a temp dir that cannot be written does not keep a run from
// starting.
func TestRun_AnUnwritableTempDirDoesNotStopTheRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the deadline file is in the temp dir outside Linux")
	}
	url, _ := testRedis(t)
	p := &dlockProcess{cmd: exec.Command(dlockBin, "run", "tmpdir", "--", "true"), exited: make(chan int, 1)}
	p.cmd.Env = append(os.Environ(), "REDIS_URL="+url, "TMPDIR="+filepath.Join(t.TempDir(), "none"))
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Run(); err != nil {
		t.Fatalf("%v\nstderr: %s", err, &p.stderr)
	}
}

// mainThreadExitsEnv makes the test binary, run as a command, write its pid
// to the file it names, then end its main thread while another thread
// runs on: /proc shows such a process as a zombie (Z).
const mainThreadExitsEnv = "DLOCK_TEST_MAIN_THREAD_EXITS"

func init() {
	if os.Getenv(mainThreadExitsEnv) != "" {
		runtime.LockOSThread() // main's goroutine stays on the main thread
	}
}

// mainThreadExits is the test binary's life under mainThreadExitsEnv.
func mainThreadExits(path string) {
	var fds [2]int
	_ = syscall.Pipe(fds[:])
	go func() {
		var b [1]byte
		_, _ = syscall.Read(fds[0], b[:]) // never written: runs on
	}()
	_ = os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	_, _, _ = syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0) // this thread only
}

// threads counts the threads of process pid, 0 once it has ended.
func threads(pid int) int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	n := 0
	for _, task := range tasks {
		if state := taskState(pid, task.Name()); state != "" && state != "Z" {
			n++
		}
	}
	return n
}

func taskState(pid int, task string) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task))
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return fields[0]
}

// Issue 36: a process whose main thread has exited while others run (Z in
// /proc) is killed on a loss like any other.
func TestRun_AProcessWhoseMainThreadExitedIsKilledOnALoss(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &dlockProcess{cmd: exec.Command(dlockBin, "run", "--ttl", "3s", "main-thread", "--", self), exited: make(chan int, 1)}
	p.cmd.Env = append(os.Environ(), "REDIS_URL="+url, mainThreadExitsEnv+"="+ready)
	p.cmd.WaitDelay = time.Second // the command, left running, holds dlock's output open
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	go func() { _ = p.cmd.Wait(); p.exited <- p.cmd.ProcessState.ExitCode() }()
	command := readPid(t, ready)
	t.Cleanup(func() { _ = syscall.Kill(command, syscall.SIGKILL) })
	waitFor(t, 10*time.Second, "the command's main thread exits", func() bool { return state(command) == "Z" })
	if threads(command) == 0 {
		t.Fatal("the command has no thread left running")
	}
	forceUnlock(t, url, "main-thread")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	if n := threads(command); n > 0 {
		t.Fatalf("the command runs on (%d threads) after the loss\nstderr: %s", n, &p.stderr)
	}
}
