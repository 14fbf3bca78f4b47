package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests hold the guard to killing every process of the command
// whatever stops, signals or closes around it: the guard stopped, its
// output closed, ^Z, --release-on-exit.

// state is process pid's state letter in /proc (R, S, T, Z…), "" once gone.
func state(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return fields[0]
}

// zombieChildren counts the zombies whose parent is pid.
func zombieChildren(pid int) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if child, err := strconv.Atoi(e.Name()); err == nil && parentOf(child) == pid && state(child) == "Z" {
			n++
		}
	}
	return n
}

// Issue 36: the guard stopped (SIGSTOP) cannot kill on a loss: dlock kills
// every process of the command itself.
func TestRun_ALossKillsTheCommandUnderAStoppedGuard(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "3s", "guard-stopped", "--",
		"sh", "-c", `echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1`, "sh", ready)
	command := readPid(t, ready)
	if err := syscall.Kill(parentOf(command), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	forceUnlock(t, url, "guard-stopped")
	waitGone(t, command, 10*time.Second, "the command, its guard stopped, after the lock was lost,")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
}

// Issue 36: dlock's output closed (dlock run … 2>&1 | true), the guard
// kills at the deadline all the same, and dlock exits 76: neither dies of
// SIGPIPE saying why.
func TestRun_AClosedOutputDoesNotSpareTheCommandAtTheDeadline(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd := exec.Command(dlockBin, "run", "--ttl", "1s", "pipe-closed", "--",
		"sh", "-c", `exec >/dev/null 2>&1; echo $$ > "$1"; exec sleep 100`, "sh", ready)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	command := readPid(t, ready)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitGone(t, command, 10*time.Second, "the command, dlock stopped and its output closed,")
	// Continued, dlock says it lost the lock to no one, and exits 76.
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != exitLost {
		t.Fatalf("dlock: %v, want exit %d", err, exitLost)
	}
}

// Issue 36: --release-on-exit, a loss or kill -9 of dlock kills the
// processes the command left while it runs, orphans too: they stay below
// the guard, their subreaper.
func TestRun_ReleaseOnExitKillsTheOrphansOnALoss(t *testing.T) {
	for _, how := range []string{"unlock --force", "kill -9"} {
		t.Run(how, func(t *testing.T) {
			url, _ := testRedis(t)
			ready := fifo(t, "ready")
			p := startDlock(t, url, "", "run", "--release-on-exit", "--ttl", "3s", "roe", "--",
				"sh", "-c", `(sleep 100 >/dev/null 2>&1 & echo $! > "$1"); exec sleep 101 >/dev/null 2>&1`, "sh", ready)
			orphan := readPid(t, ready)
			t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })
			if how == "kill -9" {
				_ = p.cmd.Process.Kill()
				p.wait(t, 15*time.Second)
			} else {
				forceUnlock(t, url, "roe")
				if code := p.wait(t, 15*time.Second); code != exitLost {
					t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
				}
			}
			waitGone(t, orphan, 10*time.Second, "the command's orphan, after "+how+",")
		})
	}
}

// Issue 36: the guard reaps the orphans it adopts as they end, not once
// the main process has.
func TestRun_TheGuardReapsOrphansAsTheyEnd(t *testing.T) {
	url, _ := testRedis(t)
	ready, finish := fifo(t, "ready"), fifo(t, "finish")
	p := startDlock(t, url, "", "run", "reaped", "--", "sh", "-c",
		`for i in 1 2 3 4 5 6 7 8 9 10; do (true &); done; echo $$ > "$1"; cat "$2" >/dev/null`, "sh", ready, finish)
	guard := parentOf(readPid(t, ready))
	waitFor(t, 10*time.Second, "the guard has reaped its orphans", func() bool { return zombieChildren(guard) == 0 })
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, &p.stderr)
	}
}

// Issue 36: once the main process has exited, dlock says that it holds
// the lock for the processes left, and under which guard they run, not
// which they are (a list would be stale as soon as printed); and passes
// SIGTERM to every process left, out of the group too.
func TestRun_HoldingForAProcessLeftIsSaidAndSIGTERMEndsIt(t *testing.T) {
	url, _ := testRedis(t)
	started := fifo(t, "started")
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(dlockBin, "run", "left-held", "--", "bash", "-c", leaveTheGroup["setsid"]+` exit 3`, "bash", started)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	leaver, _ := outOfGroup(t, started)
	said := func() string { data, _ := os.ReadFile(stderr.Name()); return string(data) }
	waitFor(t, 10*time.Second, "dlock says it holds the lock", func() bool { return strings.Contains(said(), `holding "left-held"`) })
	// Orphaned by the main process's exit, which dlock learns after it.
	want := fmt.Sprintf("dlock run: command exited (3); holding \"left-held\" until the processes it left have ended (below dlock-guard, pid %d)\n",
		parentOf(leaver))
	if got := said(); !strings.Contains(got, want) {
		t.Fatalf("stderr %q, want %q", got, want)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, leaver, 10*time.Second, "the process out of the command's group, after SIGTERM to dlock,")
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 3 {
		data, _ := os.ReadFile(stderr.Name())
		t.Fatalf("exit %v, want the main process's 3\nstderr: %s", err, data)
	}
}

// Issue 36: ^Z stops the run as one job, and the guard, which no job
// control stops, kills at the lease's deadline a process of the command
// that runs on out of the group; fg then ends the run lost.
func TestRun_CtrlZLetsNoProcessOfTheCommandRunPastTheDeadline(t *testing.T) {
	url, _ := testRedis(t)
	started, resume := fifo(t, "started"), fifo(t, "resume")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run --ttl 1s ctrl-z -- bash -c '%s printf "name? "; wait' bash %s
echo "stopped:$?"
cat %s
fg
echo "fg:$?"
sleep 600
`, url, dlockBin, strings.ReplaceAll(leaveTheGroup["setsid"], "'", `'\''`), started, resume))
	leaver, _ := outOfGroup(t, started)
	term.waitScreen("name?")
	term.tmux("send-keys", "C-z")
	term.waitScreen(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGTSTP)))
	waitGone(t, leaver, 10*time.Second, "the process out of the command's group, the run stopped by ^Z past the TTL,")
	if err := os.WriteFile(resume, []byte("fg\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	term.waitScreen(fmt.Sprintf("fg:%d", exitLost))
}

// Issue 36: once the main process has exited, ^C reaches every process of
// the command, one out of dlock's group too, which the guard passes it to.
// (A job of a shell with set -m: sh -c 'x &' without it would start x
// ignoring SIGINT.)
func TestRun_CtrlCReachesAProcessLeftOutOfTheGroup(t *testing.T) {
	url, _ := testRedis(t)
	started := fifo(t, "started")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run ctrl-c -- bash -c '%s exit 3' bash %s
echo "exit:$?"
sleep 600
`, url, dlockBin, strings.ReplaceAll(leaveTheGroup["set -m"], "'", `'\''`), started))
	leaver, _ := outOfGroup(t, started)
	term.waitScreen(`holding "ctrl-c" until`)
	term.tmux("send-keys", "C-c")
	waitGone(t, leaver, 10*time.Second, "the process out of the command's group, after ^C,")
	term.waitScreen(fmt.Sprintf("exit:%d", 128+int(syscall.SIGINT))) // the hold ended by ^C
}

// Issue 36: a run in the background of a terminal set to stop background
// writers (stty tostop) kills the command on a loss, says so without
// being stopped for it, and exits 76.
func TestRun_ALossKillsBeforeATostopTerminalStopsDlock(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	term := startTerminal(t, fmt.Sprintf(`set -m
stty tostop
export REDIS_URL=%s
%s run --ttl 3s tostop -- sh -c 'echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1' sh %s &
wait $!
echo "exit:$?"
sleep 600
`, url, dlockBin, ready))
	command := readPid(t, ready)
	forceUnlock(t, url, "tostop")
	waitGone(t, command, 10*time.Second, "the command, after the lock was lost,")
	term.waitScreen(fmt.Sprintf("exit:%d", exitLost))
	term.waitScreen(`lost the lock "tostop"`)
}

// Issue 36: --release-on-exit, the guard killed alone (kill -9) leaves no
// process of the command running once dlock has released the lock, and
// dlock says the guard was killed.
func TestRun_ReleaseOnExitAKilledGuardLeavesNoProcessOfTheCommand(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--release-on-exit", "roe-guard-killed", "--",
		"sh", "-c", `echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1`, "sh", ready)
	command := readPid(t, ready)
	t.Cleanup(func() { _ = syscall.Kill(command, syscall.SIGKILL) })
	if err := syscall.Kill(parentOf(command), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit %d, want %d (the guard's)\nstderr: %s", code, 128+int(syscall.SIGKILL), &p.stderr)
	}
	if !gone(command) {
		t.Fatalf("the command runs on, its guard killed, after dlock exited\nstderr: %s", &p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "dlock-guard (pid ") || !strings.Contains(p.stderr.String(), ") was killed by SIGKILL, not by dlock") {
		t.Fatalf("stderr %q does not say the guard was killed", &p.stderr)
	}
}

// Issue 36: a stopped guard does not read dlock's pipe: once it is full,
// dlock still acts on a loss (it used to block writing the next deadline
// there). The test fills the pipe itself, then waits for two renewals,
// which dlock once told the guard on it.
func TestRun_AStoppedGuardsFullPipeDoesNotBlockDlock(t *testing.T) {
	url, locks := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "1s", "guard-full", "--",
		"sh", "-c", `echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1`, "sh", ready)
	command := readPid(t, ready)
	guard := parentOf(command)
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", guard))
	if err != nil {
		t.Fatal(err)
	}
	fd := "3" // the descriptor of dlock's pipe, after its mode in heldEnv
	for _, v := range strings.Split(string(env), "\x00") {
		if held, ok := strings.CutPrefix(v, heldEnv+"="); ok {
			fd = strings.Fields(held)[1] // "MODE FD [ttou-ignored]"
		}
	}
	if err := syscall.Kill(guard, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(guard, syscall.SIGCONT) })
	// Until every thread of it has stopped, the guard may read a last time.
	waitFor(t, 10*time.Second, "every thread of the guard stopped", func() bool {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", guard))
		for _, task := range tasks {
			if id, _ := strconv.Atoi(task.Name()); state(id) != "T" {
				return false
			}
		}
		return len(tasks) > 0
	})
	// Empty lines, which the guard, continued, reads as no word.
	pipe, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%s", guard, fd), os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := []byte(strings.Repeat("\n", 4096))
	for {
		if _, err := syscall.Write(int(pipe.Fd()), lines[:1]); err == syscall.EAGAIN {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		_, _ = syscall.Write(int(pipe.Fd()), lines)
	}
	pipe.Close()
	full := time.Now()
	waitFor(t, 10*time.Second, "the lock renewed twice since the pipe filled", func() bool {
		info, err := locks.Describe(context.Background(), "guard-full")
		return err == nil && time.Now().Add(info.TTL).After(full.Add(1600*time.Millisecond))
	})
	forceUnlock(t, url, "guard-full")
	waitGone(t, command, 10*time.Second, "the command, its guard stopped with a full pipe, after the lock was lost,")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
}

// Issue 36: the descriptors dlock inherits reach the command unchanged,
// 3 and 4 too (make's jobserver, socket activation), as flock passes them.
func TestRun_InheritedDescriptorsReachTheCommand(t *testing.T) {
	url, _ := testRedis(t)
	dir := t.TempDir()
	var files []*os.File
	for _, name := range []string{"3", "4", "5"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	cmd := exec.Command(dlockBin, "run", "fds", "--", "sh", "-c", `echo three >&3 && echo four >&4 && echo five >&5`)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	cmd.ExtraFiles = files
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dlock: %v\n%s", err, out)
	}
	for i, want := range []string{"three\n", "four\n", "five\n"} {
		if got, _ := os.ReadFile(files[i].Name()); string(got) != want {
			t.Errorf("fd %d: %q, want %q", 3+i, got, want)
		}
	}
}

// Issue 36: once the main process has exited, ^Z stops the processes it
// left in its group and dlock with them, as one job: the shell gets the
// terminal back, and fg resumes them all, once (two stops, one job).
func TestRun_CtrlZOnTheProcessesLeftStopsTheRunAndFgResumesThem(t *testing.T) {
	url, locks := testRedis(t)
	started, resume := fifo(t, "started"), fifo(t, "resume")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run --ttl 60s ctrl-z-left -- sh -c 'sleep 100 & first=$!; sleep 100 & echo $first $! > "$1"; exit 3' sh %s
echo "stopped:$?"
cat %s
fg
echo "fg:$?"
sleep 600
`, url, dlockBin, started, resume))
	var left [2]int
	if _, err := fmt.Sscan(readFifo(t, started, 15*time.Second), &left[0], &left[1]); err != nil {
		t.Fatal(err)
	}
	for _, pid := range left {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	term.waitScreen(`holding "ctrl-z-left"`)
	term.tmux("send-keys", "C-z")
	term.waitScreen(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGTSTP)))
	for _, pid := range left {
		if s := state(pid); s != "T" {
			t.Fatalf("process %d left by the command is %q after ^Z, want stopped (T)", pid, s)
		}
	}
	if err := os.WriteFile(resume, []byte("fg\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "fg resumes the processes left", func() bool { return state(left[0]) == "S" && state(left[1]) == "S" })
	for _, pid := range left {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	term.waitScreen("fg:3")
	if info, err := locks.Describe(context.Background(), "ctrl-z-left"); err != nil || len(info.Holders) != 0 {
		t.Fatalf("after the run: %+v, %v; want the lock released", info, err)
	}
}

// Issue 36: a guard stopped (SIGSTOP) past the TTL, then continued, acts
// on the lease as dlock, which renewed it meanwhile, has it: the command
// runs on. Nothing marks a kill that does not happen: the test watches
// through a TTL once the guard runs again.
func TestRun_AGuardStoppedPastTheTTLSparesTheCommandOfALiveLease(t *testing.T) {
	url, locks := testRedis(t)
	ready, finish := fifo(t, "ready"), fifo(t, "finish")
	p := startDlock(t, url, "", "run", "--ttl", "1s", "guard-late", "--",
		"sh", "-c", `echo $$ > "$1"; cat "$2" >/dev/null`, "sh", ready, finish)
	command := readPid(t, ready)
	guard := parentOf(command)
	if err := syscall.Kill(guard, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(guard, syscall.SIGCONT) })
	// The deadline the guard knew when it stopped is at most a TTL later.
	stopped := time.Now()
	waitFor(t, 10*time.Second, "past the deadline the guard knew, the lease renewed", func() bool {
		info, err := locks.Describe(context.Background(), "guard-late")
		return time.Since(stopped) > 1500*time.Millisecond && err == nil && len(info.Holders) == 1
	})
	if err := syscall.Kill(guard, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the guard runs again", func() bool { return state(guard) != "T" })
	for until := time.Now().Add(time.Second); time.Now().Before(until); time.Sleep(10 * time.Millisecond) {
		if gone(command) {
			t.Fatalf("the guard, continued, killed the command of a live lease\nstderr: %s", &p.stderr)
		}
	}
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr: %s", code, &p.stderr)
	}
}

// Issue 36: once the main process has exited, ^C or ^\ at the terminal
// ends a hold for processes it left that ignore them (sh's & children
// ignore SIGINT and SIGQUIT): dlock SIGTERMs them, releases and exits
// 128+N, as flock(1) gives the prompt back; its holding line says so.
func TestRun_CtrlCEndsAHoldForProcessesLeftThatIgnoreIt(t *testing.T) {
	for key, sig := range map[string]syscall.Signal{"C-c": syscall.SIGINT, `C-\`: syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			url, _ := testRedis(t)
			left := filepath.Join(t.TempDir(), "left")
			term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run ctrl-c-left -- sh -c 'sleep 100 & echo $! > "$1"; exit 3' sh %s
echo "exit:$?"
sleep 600
`, url, dlockBin, left))
			leaver := pidFile(t, left)
			t.Cleanup(func() { _ = syscall.Kill(leaver, syscall.SIGKILL) })
			term.waitScreen("; ^C to stop them")
			term.tmux("send-keys", key)
			waitGone(t, leaver, 10*time.Second, "the process left, ignoring "+sig.String()+", after "+key+",")
			term.waitScreen(fmt.Sprintf("exit:%d", 128+int(sig)))
		})
	}
}
