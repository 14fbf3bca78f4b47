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

// Two signals to the job's group less than relayWait apart must not leave
// the guard a copy that no word of dlock's matched: a SIGTERM sent to
// dlock alone a second later would match that stale copy and reach no
// process of the command (review rev36e).
func TestRun_ASignalToDlockAloneAfterTwoToTheGroupIsPassedOn(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	count := t.TempDir() + "/count"
	cmd := exec.Command(dlockBin, "run", "relay-signals", "--", "bash", "-c",
		`trap 'echo TERM >> "$2"' TERM; echo $$ > "$1"
		while :; do sleep 0.05 & wait $!; done`, "bash", ready, count)
	cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	readPid(t, ready)
	pid := cmd.Process.Pid // dlock's, its group's
	counted := func(n int, within time.Duration) bool {
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if data, _ := os.ReadFile(count); strings.Count(string(data), "TERM") >= n {
				return true
			}
		}
		return false
	}
	for i := range 2 {
		if i > 0 {
			time.Sleep(100 * time.Millisecond) // two kill %1, 100 ms apart
		}
		if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if !counted(2, 5*time.Second) {
		t.Fatal("the command did not count the two SIGTERMs sent to its group")
	}
	time.Sleep(time.Second)                                    // well past relayWait: a signal of its own
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil { // docker stop
		t.Fatal(err)
	}
	if !counted(3, 5*time.Second) {
		t.Fatal("a SIGTERM sent to dlock alone, 1 s after two to the group, never reached the command")
	}
}

// A background run whose command set the terminal has stopped alone
// (SIGTTOU; dlock ignores it): bash shows the job Running, so its kill %1
// sends SIGTERM with no SIGCONT. The guard continues the command's
// processes after it, as bash's kill of a job it knows stopped would
// (review rev36e).
func TestRun_KillOfABackgroundRunStoppedBySettingTheTerminalEndsIt(t *testing.T) {
	url, _ := testRedis(t)
	command := filepath.Join(t.TempDir(), "command")
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash, whose kill %1 sends no SIGCONT to a job it sees running")
	}
	term := startTerminal(t, fmt.Sprintf(`[ -n "$BASH" ] || exec bash --rcfile "$0" -i
set -m
export REDIS_URL=%s
%s run kill-bg-ttou -- sh -c 'echo $$ > "$1"; sleep 0.5; stty -echo; stty echo; echo "done:$((40+2))"' sh %s &
while [ ! -s %s ]; do sleep 0.01; done
read go
kill %%1
wait %%1
echo "wait:$?"
sleep 600
`, url, dlockBin, command, command))
	cmd := 0
	waitFor(t, 15*time.Second, "the command started", func() bool {
		data, _ := os.ReadFile(command)
		cmd, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return cmd > 0
	})
	waitFor(t, 15*time.Second, "the command stopped by SIGTTOU", func() bool {
		for _, pid := range append([]int{cmd}, childrenOf(t, cmd)...) {
			if state(pid) == "T" {
				return true
			}
		}
		return false
	})
	term.typeLine("")
	term.waitScreen("wait:143")
}

// A command that sets the terminal at once, in the background (stty
// -echo), sends SIGTTOU to the whole group as it starts: the guard must
// catch it from before the command starts, or it stops too, cannot kill
// at the deadline, and the run hangs. 25 runs, as the race is narrow.
func TestRun_AGuardIsNotStoppedByItsCommandSettingTheTerminalAtOnce(t *testing.T) {
	url, _ := testRedis(t)
	pids := filepath.Join(t.TempDir(), "pids")
	startTerminal(t, fmt.Sprintf(`[ -n "$BASH" ] || exec bash --rcfile "$0" -i
set -m
export REDIS_URL=%s
for i in $(seq 25); do %s run stty-at-once-$i -- stty -echo & echo $! >> %s; done
sleep 600
`, url, dlockBin, pids))
	var dlocks []int
	waitFor(t, 15*time.Second, "25 runs started", func() bool {
		data, _ := os.ReadFile(pids)
		dlocks = dlocks[:0]
		for _, field := range strings.Fields(string(data)) {
			pid, _ := strconv.Atoi(field)
			dlocks = append(dlocks, pid)
		}
		return len(dlocks) == 25
	})
	for _, pid := range dlocks {
		t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }) // set -m: its own group
	}
	guards := make([]int, len(dlocks))
	waitFor(t, 30*time.Second, "every stty stopped for the terminal", func() bool {
		for i, pid := range dlocks {
			if children := childrenOf(t, pid); len(children) == 1 {
				guards[i] = children[0]
			}
			if children := childrenOf(t, guards[i]); guards[i] == 0 || len(children) != 1 || state(children[0]) != "T" {
				return false
			}
		}
		return true
	})
	stopped := 0
	for _, guard := range guards {
		if state(guard) == "T" {
			stopped++
		}
	}
	if stopped > 0 {
		t.Fatalf("%d of 25 guards stopped by their command's SIGTTOU", stopped)
	}
}
