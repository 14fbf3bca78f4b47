package main

import (
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

// These tests hold dlock run to a shell's job control as flock(1) meets
// it: dlock, its guard and the command are one job, in dlock's process
// group, which the kernel stops, continues and interrupts as a whole;
// dlock never touches the terminal.

// statField is field n (1-based, as proc(5) counts) of /proc/PID/stat.
func statField(t *testing.T, pid, n int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	v, err := strconv.Atoi(fields[n-3])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// foregroundOf is the foreground group of pid's terminal (tpgid).
func foregroundOf(t *testing.T, pid int) int { return statField(t, pid, 8) }

// pidFile waits for a pid written to file.
func pidFile(t *testing.T, file string) int {
	t.Helper()
	var pid int
	waitFor(t, 15*time.Second, file+" is written", func() bool {
		data, err := os.ReadFile(file)
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

func release(t *testing.T, fifo string) {
	t.Helper()
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Issue 36 (review of the terminal handover): ^Z, then bg, of a run whose
// command reads the terminal at once: the command stops again (Stopped
// (tty input)), and fg gives it the terminal and the run completes. The
// kernel stops the whole job, dlock too, as the shell sees it; but bg
// continues the command first, and its SIGTTIN may reach dlock before
// bg's SIGCONT does, which then discards it: dlock runs on as flock(1)
// would, and fg still resumes the command. That dlock stops is held
// deterministically by TestRun_ABackgroundedRunLeavesTheTerminalToTheShell.
func TestRun_BgOfARunReadingTheTerminalStopsItAndFgCompletesIt(t *testing.T) {
	url, _ := testRedis(t)
	dir := t.TempDir()
	command, resume := filepath.Join(dir, "command"), fifo(t, "resume")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run bg-read -- sh -c 'echo $$ > "$1"; printf "name? "; read a; echo "got:$a"' sh %s
echo "stopped:$?"
bg
cat %s >/dev/null
fg
echo "fg:$?"
sleep 600
`, url, dlockBin, command, resume))
	term.waitScreen("name?")
	cmd := pidFile(t, command)
	dlockPid := parentOf(parentOf(cmd))
	term.tmux("send-keys", "C-z")
	term.waitScreen(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGTSTP)))
	// bg continues the run; the command's read stops it again.
	waitFor(t, 10*time.Second, "the command stopped again after bg", func() bool { return state(cmd) == "T" })
	t.Logf("dlock is %q once the command has stopped", state(dlockPid))
	release(t, resume)
	term.typeLine("hello")
	term.waitScreen("got:hello")
	term.waitScreen("fg:0")
}

// Issue 36 (review): two runs started at once by make -j2 are both in
// make's job: ^C reaches both commands.
func TestRun_CtrlCReachesBothRunsOfAParallelMake(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	url, _ := testRedis(t)
	dir := t.TempDir()
	makefile := filepath.Join(dir, "Makefile")
	recipe := func(name string) string {
		return fmt.Sprintf("%s:\n\t%s run %s -- sh -c 'echo $$$$ > %s; exec sleep 100'\n",
			name, dlockBin, name, filepath.Join(dir, name))
	}
	if err := os.WriteFile(makefile, []byte(".PHONY: all a b\nall: a b\n"+recipe("a")+recipe("b")), 0o600); err != nil {
		t.Fatal(err)
	}
	// A job killed by SIGINT makes sh raise it on itself: trapped, it
	// runs on. Caught, not ignored, which make would inherit.
	term := startTerminal(t, fmt.Sprintf(`set -m
trap 'echo trapped' INT
export REDIS_URL=%s
make -j2 -C %s
echo "make:$?"
sleep 600
`, url, dir))
	a, b := pidFile(t, filepath.Join(dir, "a")), pidFile(t, filepath.Join(dir, "b"))
	t.Cleanup(func() { _ = syscall.Kill(a, syscall.SIGKILL); _ = syscall.Kill(b, syscall.SIGKILL) })
	term.tmux("send-keys", "C-c")
	waitGone(t, a, 10*time.Second, "the first run's command, after ^C,")
	waitGone(t, b, 10*time.Second, "the second run's command, after ^C,")
	term.waitScreen("make:")
}

// Issue 36 (review): ^C reaches the command once. The terminal sends
// SIGINT to the whole job, dlock and its guard too, which must not pass
// it on again: many tools take a second ^C for "force quit". The command
// is perl, whose handlers run once per signal delivered (a shell's trap
// runs once for several). The test then sends SIGTERM to dlock, passed
// on after any SIGINT dlock would have passed; perl runs INT's handler
// first.
func TestRun_CtrlCReachesTheCommandOnce(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl")
	}
	url, _ := testRedis(t)
	command := filepath.Join(t.TempDir(), "command")
	script := filepath.Join(t.TempDir(), "count.pl")
	if err := os.WriteFile(script, []byte(`$n = 0;
$SIG{INT} = sub { $n++; print "int:$n\n" };
$SIG{TERM} = sub { print "count:$n\n"; exit 0 };
$| = 1;
open(my $f, ">", $ARGV[0]) or die; print $f "$$\n"; close($f);
sleep 1 while 1;
`), 0o600); err != nil {
		t.Fatal(err)
	}
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run ctrl-c-once -- perl %s %s
echo "exit:$?"
sleep 600
`, url, dlockBin, script, command))
	cmd := pidFile(t, command)
	dlockPid := parentOf(parentOf(cmd))
	term.tmux("send-keys", "C-c")
	term.waitScreen("int:1")
	if err := syscall.Kill(dlockPid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	term.waitScreen("exit:")
	if screen := term.screen(); !strings.Contains(screen, "count:1") {
		t.Fatalf("one ^C, want the command to count 1 SIGINT:\n%s", screen)
	}
}

// Issue 36 (review): dlock runs in its caller's process group, which may
// be a script's: a lost lock, or kill -9 of dlock, kills the command and
// never the script that ran dlock.
func TestRun_ALossOrKillOfDlockSparesTheCallingScript(t *testing.T) {
	for _, how := range []string{"unlock --force", "kill -9"} {
		t.Run(how, func(t *testing.T) {
			url, _ := testRedis(t)
			ready := fifo(t, "ready")
			script := exec.Command("sh", "-c", `"$1" run --ttl 3s caller -- sh -c 'echo $$ > "$1"; exec sleep 100 >/dev/null 2>&1' sh "$2"; echo "after:$?"`,
				"sh", dlockBin, ready)
			script.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // dlock's group, the script's
			p := startProcess(t, script, url, "")
			command := readPid(t, ready)
			dlockPid := parentOf(parentOf(command))
			if how == "kill -9" {
				if err := syscall.Kill(dlockPid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			} else {
				forceUnlock(t, url, "caller")
			}
			waitGone(t, command, 10*time.Second, "the command, after "+how+",")
			if code := p.wait(t, 15*time.Second); code != 0 || !strings.Contains(p.stdout.String(), "after:") {
				t.Fatalf("the calling sh: exit %d, stdout %q, want it to run on after dlock\nstderr: %s", code, &p.stdout, &p.stderr)
			}
		})
	}
}

// Issue 36: a run stopped by ^Z and sent to the background (bg) stops
// again when its command, or a process the command left once its main
// process exited, reads the terminal ("Stopped (tty input)"): the shell
// keeps the terminal and reads it; fg resumes the run.
func TestRun_ABackgroundedRunLeavesTheTerminalToTheShell(t *testing.T) {
	t.Run("command", func(t *testing.T) {
		backgroundedRun(t, "bg-keeps", "ready",
			`sh -c 'echo $$ > "$1"; echo ready; cat "$2" >/dev/null; read a; echo "got:$a"' sh`)
	})
	// In ( ), $$ is still the command's pid: the process left is the
	// parent of a sh it runs.
	t.Run("process left", func(t *testing.T) {
		backgroundedRun(t, "bg-left", `holding "bg-left"`,
			`sh -c 'exec 3<&0; (echo $(sh -c "echo \$PPID") > "$1"; cat "$2" >/dev/null; read a <&3; echo "got:$a") & exit 0' sh`)
	})
}

// backgroundedRun runs command (given its pid file and a fifo to read
// before it reads the terminal) as lock at an interactive shell, once
// shown is on the screen: ^Z, bg, then the reading process and dlock must
// stop and the shell keep the terminal.
func backgroundedRun(t *testing.T, lock, shown, command string) {
	url, _ := testRedis(t)
	dir := t.TempDir()
	shell, reader, proceed := filepath.Join(dir, "shell"), filepath.Join(dir, "reader"), fifo(t, "proceed")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
echo $$ > %s
%s run %s -- %s %s %s
echo "stopped:$?"
bg
printf "shell? "; read line; echo "shell:$line"
fg
echo "fg:$?"
sleep 600
`, url, shell, dlockBin, lock, command, reader, proceed))
	term.waitScreen(shown)
	waiting := pidFile(t, reader)
	dlockPid := parentOf(parentOf(waiting))
	term.tmux("send-keys", "C-z")
	term.waitScreen(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGTSTP)))
	term.waitScreen("shell?")
	release(t, proceed) // it reads the terminal, in the background
	waitFor(t, 10*time.Second, "the reader and dlock stop", func() bool { return state(waiting) == "T" && state(dlockPid) == "T" })
	sh := pidFile(t, shell)
	if fg := foregroundOf(t, sh); fg != sh {
		t.Fatalf("the terminal's foreground group is %d, want the shell's %d (dlock's is %d)", fg, sh, dlockPid)
	}
	term.typeLine("hello")
	term.waitScreen("shell:hello")
	term.typeLine("world")
	term.waitScreen("got:world")
	term.waitScreen("fg:0")
}

// Issue 36: ^Z stops a run in a script, and the script with it, as one
// job of the shell that ran the script; fg resumes them.
func TestRun_CtrlZStopsARunInAScript(t *testing.T) {
	url, _ := testRedis(t)
	script := filepath.Join(t.TempDir(), "s.sh")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(`%s run in-script -- sh -c 'printf "name? "; read a; echo "got:$a"'
echo "dlock:$?"
`, dlockBin)), 0o700); err != nil {
		t.Fatal(err)
	}
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s
echo "stopped:$?"
fg
echo "fg:$?"
sleep 600
`, url, script))
	term.waitScreen("name?")
	term.tmux("send-keys", "C-z")
	term.waitScreen(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGTSTP)))
	term.typeLine("hello")
	term.waitScreen("got:hello")
	term.waitScreen("dlock:0")
	term.waitScreen("fg:0")
}

// Issue 36: a run started in the background, whose command stops reading
// the terminal, reads it once fg brings the run to the foreground.
func TestRun_FgGivesTheTerminalToABackgroundRun(t *testing.T) {
	url, _ := testRedis(t)
	dir := t.TempDir()
	command, proceed := filepath.Join(dir, "command"), fifo(t, "proceed")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run bg-fg -- sh -c 'echo $$ > "$1"; read a; echo "got:$a"' sh %s &
cat %s >/dev/null
fg
echo "fg:$?"
sleep 600
`, url, dlockBin, command, proceed))
	cmd := pidFile(t, command)
	dlockPid := parentOf(parentOf(cmd))
	waitFor(t, 10*time.Second, "the command stops reading the terminal, and dlock with it",
		func() bool { return state(cmd) == "T" && state(dlockPid) == "T" })
	release(t, proceed)
	waitFor(t, 10*time.Second, "the command runs again", func() bool { return state(cmd) == "S" })
	term.typeLine("hello")
	term.waitScreen("got:hello")
	term.waitScreen("fg:0")
}

// Issue 36: a run stopped by SIGSTOP, whose command stopped meanwhile
// reading the terminal, resumes at the first fg: the command's stop,
// reported while dlock was stopped, is not taken for a ^Z then.
func TestRun_FgResumesARunStoppedBySIGSTOPAtOnce(t *testing.T) {
	url, _ := testRedis(t)
	dir := t.TempDir()
	command, proceed, resume := filepath.Join(dir, "command"), fifo(t, "proceed"), fifo(t, "resume")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run sigstop -- sh -c 'echo $$ > "$1"; cat "$2" >/dev/null; printf "name? "; read a; echo "got:$a"' sh %s %s
echo "stopped:$?"
cat %s >/dev/null
fg
echo "fg:$?"
sleep 600
`, url, dlockBin, command, proceed, resume))
	cmd := pidFile(t, command)
	dlockPid := parentOf(parentOf(cmd))
	if err := syscall.Kill(dlockPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	term.waitScreen(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGSTOP)))
	release(t, proceed) // the command reads the terminal, in the background
	waitFor(t, 10*time.Second, "the command stops reading the terminal", func() bool { return state(cmd) == "T" })
	release(t, resume)
	term.waitScreen("name?")
	term.typeLine("hello")
	term.waitScreen("got:hello")
	term.waitScreen("fg:0")
}

// Review rev36d: a background run whose command sets the terminal (stty,
// vi, less: tcsetattr sends SIGTTOU whatever tostop says) completes at
// fg. dlock ignores SIGTTOU, so only the command stops and the shell sees
// the job Running: bash's fg (not dash's, which always sends SIGCONT)
// sends no SIGCONT. The guard continues the command once fg has given
// the job the terminal; before, the run hung, the lock renewed for ever.
// The lock stays held meanwhile, past the TTL (fg:0, not 76).
func TestRun_FgResumesABackgroundRunStoppedBySettingTheTerminal(t *testing.T) {
	url, _ := testRedis(t)
	command := filepath.Join(t.TempDir(), "command")
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash, whose fg sends no SIGCONT to a job it sees running")
	}
	term := startTerminal(t, fmt.Sprintf(`[ -n "$BASH" ] || exec bash --rcfile "$0" -i
set -m
export REDIS_URL=%s
%s run --ttl 2s bg-ttou -- sh -c 'echo $$ > "$1"; stty -echo; stty echo; echo "done:$((40+2))"' sh %s &
while [ ! -s %s ]; do sleep 0.01; done
read go
jobs
fg
echo "fg:$?"
sleep 600
`, url, dlockBin, command, command))
	cmd := 0
	waitFor(t, 15*time.Second, "the command started", func() bool {
		data, _ := os.ReadFile(command)
		cmd, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return cmd > 0
	})
	stopped := func() bool {
		for _, pid := range append([]int{cmd}, childrenOf(t, cmd)...) {
			if state(pid) == "T" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(15 * time.Second); !stopped(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			ps, _ := exec.Command("ps", "-eo", "pid,ppid,pgid,tpgid,stat,args").CombinedOutput()
			t.Fatalf("not within 15s: the command stopped by SIGTTOU\nscreen:\n%s\nps:\n%s", term.screen(), ps)
		}
	}
	time.Sleep(3 * time.Second) // stopped past the TTL: the lock must stay held
	term.typeLine("")
	term.waitScreen("done:42")
	term.waitScreen("fg:0")
}

// Review rev36d: a signal reaches the command once, sent to the job's
// group (bash's kill %1, timeout(1), kill -TERM -PGID) as to dlock
// alone (docker stop, kill PID), or to both at once, as timeout(1)
// does. Sent to the group, the command has it from the kernel already:
// dlock passed it on again, the guard again (3 SIGTERMs), and tools that
// take a second one for "force quit" did.
func TestRun_ASignalReachesTheCommandOnce(t *testing.T) {
	for _, to := range []string{"group", "dlock", "dlock then group"} {
		t.Run(to, func(t *testing.T) {
			url, _ := testRedis(t)
			ready := fifo(t, "ready")
			count := t.TempDir() + "/count"
			cmd := exec.Command(dlockBin, "run", "signal-once", "--", "bash", "-c",
				`trap 'echo TERM >> "$2"; n=1' TERM; n=0; echo $$ > "$1"
				while [ $n = 0 ]; do sleep 0.05 & wait $!; done; sleep 1 & wait $!; sleep 1 & wait $!`, "bash", ready, count)
			cmd.Env = append(os.Environ(), "REDIS_URL="+url)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			readPid(t, ready)
			pid := cmd.Process.Pid // dlock's, its group's
			kills := map[string][]int{"group": {-pid}, "dlock": {pid}, "dlock then group": {pid, -pid}}[to]
			for i, pid := range kills {
				if i > 0 {
					// Apart, as timeout's two kill(2)s often are: dlock
					// takes each on its own rather than one merged.
					time.Sleep(50 * time.Millisecond)
				}
				if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			_ = cmd.Wait()
			data, _ := os.ReadFile(count)
			if n := strings.Count(string(data), "TERM"); n != 1 {
				t.Fatalf("the command got SIGTERM %d times for one kill of the %s", n, to)
			}
		})
	}
}
