package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests hold dlock run to a shell's job control: dlock and its
// command are one job, which stops, goes to the background and comes back
// to the foreground as any other, and never takes the terminal from the
// shell.

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

// Issue 36: a run stopped by ^Z and sent to the background (bg) stops
// again when its command, or a process the command left in its group once
// its main process exited, reads the terminal ("Stopped (tty input)"). It
// leaves the terminal to the shell, which reads it; fg resumes the run.
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
