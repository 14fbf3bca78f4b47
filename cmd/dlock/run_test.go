package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/observe"
)

// These tests hold `dlock run` to what flock(1) does: the command owns the
// terminal, dies with dlock, and its background processes keep the lock.

// gone says whether process pid has ended: not there, or a zombie nobody
// has reaped yet.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// waitGone fails the test unless process pid ends within guard.
func waitGone(t *testing.T, pid int, guard time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(guard); !gone(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs after %v", what, pid, guard)
		}
		time.Sleep(10 * time.Millisecond) // another process: nothing to wait on but its state
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(readFifo(t, path, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitFor polls cond (state in another process) until it holds, failing the
// test after guard.
func waitFor(t *testing.T, guard time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(guard); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", guard, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// terminal is a tmux session on a socket of the test's own: a real
// terminal whose screen the test reads and whose keys it types.
type terminal struct {
	t      *testing.T
	socket string
}

// startTerminal runs script with sh in a new tmux session.
func startTerminal(t *testing.T, script string) *terminal {
	t.Helper()
	return startTerminalOfWidth(t, 120, script)
}

// startTerminalOfWidth is startTerminal on a terminal width columns wide.
func startTerminalOfWidth(t *testing.T, width int, script string) *terminal {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: the terminal tests need it (apt-get install tmux)")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "session.sh")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, socket: filepath.Join(dir, "tmux")}
	term.tmux("-f", "/dev/null", "new-session", "-d", "-x", strconv.Itoa(width), "-y", "30", "sh "+file)
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", term.socket, "kill-server").Run() })
	return term
}

func (term *terminal) tmux(args ...string) string {
	term.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", term.socket}, args...)...).CombinedOutput()
	if err != nil {
		term.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (term *terminal) screen() string { return term.tmux("capture-pane", "-p") }

// waitScreen waits until the screen shows text.
func (term *terminal) waitScreen(text string) {
	term.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		screen := term.screen()
		if strings.Contains(screen, text) {
			return
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("the terminal does not show %q:\n%s", text, screen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (term *terminal) typeLine(line string) {
	term.tmux("send-keys", "-l", line)
	term.tmux("send-keys", "Enter")
}

// Item 5: the command reads the terminal (it runs in dlock's process
// group, the terminal's foreground), and the shell reads it after.
func TestRun_AnInteractiveCommandReadsTheTerminal(t *testing.T) {
	url, locks := testRedis(t)
	term := startTerminal(t, fmt.Sprintf(`export REDIS_URL=%s
%s run tty-job -- sh -c 'printf "name? "; read answer; echo "got:$answer"'
echo "exit:$?"
printf "again? "; read again; echo "again:$again"
sleep 600
`, url, dlockBin))
	term.waitScreen("name?")
	term.tmux("send-keys", "C-z") // no job control here: ^Z does nothing
	term.typeLine("hello")
	term.waitScreen("got:hello")
	term.waitScreen("exit:0")
	term.typeLine("world") // the shell reads: dlock gave the terminal back
	term.waitScreen("again:world")
	if info, err := locks.Describe(context.Background(), "tty-job"); err != nil || len(info.Holders) != 0 {
		t.Fatalf("after the run: %+v, %v; want the lock released", info, err)
	}
}

// Item 5, ^Z: the command and dlock stop as one job, and fg resumes
// both, the command with the terminal.
func TestRun_CtrlZSuspendsTheRunAndFgResumesIt(t *testing.T) {
	url, _ := testRedis(t)
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run tty-stop -- sh -c 'printf "name? "; read answer; echo "got:$answer"'
echo "stopped:$?"
fg
echo "fg:$?"
sleep 600
`, url, dlockBin))
	term.waitScreen("name?")
	term.tmux("send-keys", "C-z")
	term.waitScreen(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGTSTP)))
	term.typeLine("hello")
	term.waitScreen("got:hello")
	term.waitScreen("fg:0")
}

// Item 5: run in the background of an interactive shell, the command is
// stopped when it reads the terminal, as any background job, and dlock
// with it (Stopped (tty input)); SIGTERM to dlock, continued as a shell's
// kill continues a stopped job, still ends it (forwarded with SIGCONT) and
// releases the lock.
func TestRun_SIGTERMEndsACommandStoppedByTheTerminal(t *testing.T) {
	url, locks := testRedis(t)
	dir := t.TempDir()
	dlockPid, commandPid := filepath.Join(dir, "dlock"), filepath.Join(dir, "command")
	term := startTerminal(t, fmt.Sprintf(`set -m
export REDIS_URL=%s
%s run bg-tty -- sh -c 'echo $$ > "$1"; read answer; echo "got:$answer"' sh %s &
echo $! > %s
wait $!
echo "stopped:$?"
sleep 600
`, url, dlockBin, commandPid, dlockPid))
	command := pidFile(t, commandPid)
	term.waitScreen(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGTTIN)))
	if s := state(command); s != "T" {
		t.Fatalf("the command is %q, want stopped (T)", s)
	}
	dlock := pidFile(t, dlockPid)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGCONT} {
		if err := syscall.Kill(dlock, sig); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, command, 10*time.Second, "the command, after SIGTERM to dlock,")
	waitGone(t, dlock, 10*time.Second, "dlock, after SIGTERM,")
	if info, err := locks.Describe(context.Background(), "bg-tty"); err != nil || len(info.Holders) != 0 {
		t.Fatalf("after the run: %+v, %v; want the lock released", info, err)
	}
}

// Item 6: kill -9 of dlock kills the command, which would otherwise go on
// without the lock once its TTL runs out.
func TestRun_TheCommandDiesWithDlock(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "1s", "orphan", "--",
		"sh", "-c", `echo $$ > "$1"; exec sleep 60 >/dev/null 2>&1`, "sh", ready)
	command := readPid(t, ready)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 15*time.Second)
	waitGone(t, command, 10*time.Second, "the command, after kill -9 of dlock,")
}

// Issue 36.1: kill -9 of dlock takes the command's whole process group down,
// not only its main process: a script's running step (sh -c 'step; next')
// must not go on while a second run takes the lock.
func TestRun_KillOfDlockTakesTheCommandsGroupDown(t *testing.T) {
	url, _ := testRedis(t)
	ready := fifo(t, "ready")
	p := startDlock(t, url, "", "run", "--ttl", "1s", "deploy-step", "--",
		"sh", "-c", `sleep 60 >/dev/null 2>&1 & echo $! > "$1"; wait; echo next`, "sh", ready)
	step := readPid(t, ready)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 15*time.Second)
	waitGone(t, step, 10*time.Second, "the command's running step, after kill -9 of dlock,")
}

// Issue 36.1: dlock killed after starting the command's guard but before
// telling it to run the command: no process of the command may run on.
func TestRun_KillOfDlockBeforeTheGuardKnowsTheGroup(t *testing.T) {
	url, _ := testRedis(t)
	paused := fifo(t, "paused")
	childFile := filepath.Join(t.TempDir(), "child")
	t.Setenv(pauseBeforeWatchEnv, paused)
	p := startDlock(t, url, "", "run", "--ttl", "1s", "early", "--",
		"sh", "-c", `sleep 60 >/dev/null 2>&1 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 61 >/dev/null 2>&1`,
		"sh", childFile)
	command := readPid(t, paused)
	self, err := filepath.EvalSymlinks(dlockBin)
	if err != nil {
		t.Fatal(err)
	}
	// Kill dlock once the command has forked its child, or while the guard,
	// dlock's binary, holds the command back.
	waitFor(t, 15*time.Second, "the command's child started, or the command held back", func() bool {
		_, err := os.Stat(childFile)
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", command))
		return err == nil || exe == self
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 15*time.Second)
	waitGone(t, command, 10*time.Second, "the command, after kill -9 of dlock,")
	if data, err := os.ReadFile(childFile); err == nil {
		child, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
		waitGone(t, child, 10*time.Second, "the command's child, after kill -9 of dlock before the guard ran it,")
	}
}

// Item 7: like flock(1), whose descriptor the command's children inherit,
// the lock is held until the processes the command left running end.
func TestRun_BackgroundProcessesOfTheCommandKeepTheLock(t *testing.T) {
	url, locks := testRedis(t)
	started, finish := fifo(t, "started"), fifo(t, "finish")
	// The main process leaves one in the background, blocked on finish.
	p := startDlock(t, url, "", "run", "bg", "--",
		"sh", "-c", `cat "$2" >/dev/null 2>&1 & echo $$ > "$1"`, "sh", started, finish)
	main := readPid(t, started)
	waitGone(t, main, 15*time.Second, "the main process")
	select {
	case code := <-p.exited:
		t.Fatalf("dlock exited (%d) while the command's background process runs\nstderr: %s", code, &p.stderr)
	default:
	}
	if code, _, stderr := runDlock(t, url, "run", "--wait", "0", "bg", "--", "true"); code != exitNotAcquired {
		t.Fatalf("another run while the background process runs: exit %d, want %d\n%s", code, exitNotAcquired, stderr)
	}
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d, want the main process's 0\nstderr: %s", code, &p.stderr)
	}
	if info, err := locks.Describe(context.Background(), "bg"); err != nil || len(info.Holders) != 0 {
		t.Fatalf("after the run: %+v, %v; want the lock released", info, err)
	}
}

// Item 7: waiting for the group is bounded by the lock: lost, the
// processes left in the background are stopped and dlock exits 76.
func TestRun_ALostLockStopsTheBackgroundProcessesLeft(t *testing.T) {
	url, _ := testRedis(t)
	started := fifo(t, "started")
	p := startDlock(t, url, "", "run", "--ttl", "1s", "--kill-grace", "2s", "bg-lost", "--",
		"sh", "-c", `sleep 60 >/dev/null 2>&1 & echo $! > "$1"`, "sh", started)
	background := readPid(t, started)
	forceUnlock(t, url, "bg-lost")
	if code := p.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
	}
	waitGone(t, background, 10*time.Second, "the background process, after the lock was lost,")
}

func TestRun_ReleaseOnExitLetsBackgroundProcessesRunWithoutTheLock(t *testing.T) {
	url, locks := testRedis(t)
	finish := fifo(t, "finish")
	code, _, stderr := runDlock(t, url, "run", "--release-on-exit", "bg", "--",
		"sh", "-c", `cat "$1" >/dev/null 2>&1 &`, "sh", finish)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if info, err := locks.Describe(context.Background(), "bg"); err != nil || len(info.Holders) != 0 {
		t.Fatalf("after the run: %+v, %v; want the lock released", info, err)
	}
	if err := os.WriteFile(finish, []byte("done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Item 9: flags may follow NAME, up to "--".
func TestRun_FlagsAfterTheName(t *testing.T) {
	url, locks := testRedis(t)
	held, err := locks.RWMutex("fa").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	if code, _, stderr := runDlock(t, url, "run", "fa", "--wait", "0", "--", "echo", "hi"); code != exitNotAcquired {
		t.Fatalf("run fa --wait 0 -- echo hi, fa held: exit %d, want %d\n%s", code, exitNotAcquired, stderr)
	}
	if code, stdout, stderr := runDlock(t, url, "run", "fb", "--ttl", "5s", "--shared", "--", "echo", "hi"); code != 0 || stdout != "hi\n" {
		t.Fatalf("run fb --ttl 5s --shared -- echo hi: exit %d, %q\n%s", code, stdout, stderr)
	}
	if code, _, stderr := runDlock(t, url, "run", "fb", "--bogus", "--", "echo", "hi"); code != exitUsage {
		t.Fatalf("an unknown flag after NAME: exit %d, want %d\n%s", code, exitUsage, stderr)
	}
	if code, stdout, _ := runDlock(t, url, "run", "fb", "--", "echo", "--wait"); code != 0 || stdout != "--wait\n" {
		t.Fatalf("after --, flags are the command's: exit %d, %q", code, stdout)
	}
}

// Item 10: a signal while waiting withdraws the registration and exits 128+N.
func TestRun_ASignalWhileWaitingLeavesTheQueue(t *testing.T) {
	url, locks := testRedis(t)
	ctx := context.Background()
	held, err := locks.RWMutex("queue").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		p := startDlock(t, url, "", "run", "queue", "--", "true")
		waitFor(t, 15*time.Second, "dlock registers as a waiter", func() bool {
			info, err := locks.Describe(ctx, "queue")
			return err == nil && info.WritersWaiting == 1
		})
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 15*time.Second); code != 128+int(sig) {
			t.Fatalf("%v while waiting: exit %d, want %d\nstderr: %s", sig, code, 128+int(sig), &p.stderr)
		}
		if info, err := locks.Describe(ctx, "queue"); err != nil || info.WritersWaiting != 0 {
			t.Fatalf("after %v: %+v, %v; want no waiter left", sig, info, err)
		}
	}
}

// Item 11: a URL dlock cannot use is a bad argument; host:port is accepted.
func TestRun_RedisAddresses(t *testing.T) {
	url, _ := testRedis(t)
	code, _, stderr := runDlock(t, "http://127.0.0.1:1", "run", "job", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "redis://") || !strings.Contains(stderr, "host:port") {
		t.Fatalf("an http:// URL: exit %d, want %d and the accepted forms\n%s", code, exitUsage, stderr)
	}
	hostPort := strings.TrimPrefix(url, "redis://")
	if code, _, stderr := runDlock(t, hostPort, "run", "job", "--", "true"); code != 0 {
		t.Fatalf("host:port: exit %d\n%s", code, stderr)
	}
	cluster := redistest.StartCluster(t)
	if code, _, stderr := runDlock(t, strings.Join(cluster.Addrs(), ","), "run", "job", "--", "true"); code != 0 {
		t.Fatalf("a cluster as host:port,host:port,…: exit %d\n%s", code, stderr)
	}
}

// Items 11 and 12: a user granted what the README lists runs commands; a
// wrong password or a missing right is refused access (77), not unreachable.
func TestRun_AsAUserWithTheDocumentedRights(t *testing.T) {
	var lacking []string // the documented rights but the scripts
	for _, r := range redistest.DlockACL {
		if !slices.Contains([]string{"+eval", "+evalsha", "+script|load", "+fcall", "+function|load"}, r) {
			lacking = append(lacking, r)
		}
	}
	args := append(redistest.UserArgs("locks", "pw", redistest.DlockACL), redistest.UserArgs("noscripts", "pw", lacking)...)
	srv := redistest.Start(t, args...)
	locks, err := dlock.New(srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })

	if code, stdout, stderr := runDlock(t, "redis://locks:pw@"+srv.Addr(), "run", "acl-job", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Fatalf("as a user with the README's rights: exit %d, %q\n%s", code, stdout, stderr)
	}
	if info, err := locks.Describe(context.Background(), "acl-job"); err != nil || len(info.Holders) != 0 {
		t.Fatalf("after the run: %+v, %v; want the lock released", info, err)
	}
	for what, url := range map[string]string{
		"a wrong password": "redis://locks:wrong@" + srv.Addr(),
		"a missing right":  "redis://noscripts:pw@" + srv.Addr(),
		"an unknown user":  "redis://nobody:pw@" + srv.Addr(),
	} {
		for _, args := range [][]string{{"run", "acl-job", "--", "true"}, {"status", "acl-job"}, {"unlock", "--force", "--yes", "acl-job"}} {
			code, _, stderr := runDlock(t, url, args...)
			if code != exitNoPermission || strings.Contains(stderr, "cannot reach") {
				t.Errorf("%s, dlock %s: exit %d, want %d, not \"cannot reach\"\n%s", what, args[0], code, exitNoPermission, stderr)
			}
		}
	}
}

// flock(1)'s -n with -E: a busy lock can be told apart from the command's
// own exit codes, and said nothing about.
func TestRun_BusyLockMessageQuietAndConflictExitCode(t *testing.T) {
	url, locks := testRedis(t)
	held, err := locks.RWMutex("busy", dlock.WithOwner("host-a/pid-7")).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	code, _, stderr := runDlock(t, url, "run", "--wait", "300ms", "busy", "--", "true")
	if code != exitNotAcquired || !strings.Contains(stderr, "busy") || !strings.Contains(stderr, admin.OwnerHash("host-a/pid-7")) ||
		strings.Contains(stderr, "deadline") {
		t.Fatalf("a busy lock: exit %d, stderr %q; want %d, saying busy and who holds it", code, stderr, exitNotAcquired)
	}
	if code, _, stderr := runDlock(t, url, "run", "--quiet", "--wait", "0", "busy", "--", "true"); code != exitNotAcquired || stderr != "" {
		t.Fatalf("--quiet: exit %d, stderr %q; want %d and nothing", code, stderr, exitNotAcquired)
	}
	if code, _, _ := runDlock(t, url, "run", "--conflict-exit-code", "3", "--wait", "0", "busy", "--", "true"); code != 3 {
		t.Fatalf("--conflict-exit-code 3: exit %d", code)
	}
	if code, _, _ := runDlock(t, url, "run", "--conflict-exit-code", "256", "busy", "--", "true"); code != exitUsage {
		t.Fatalf("--conflict-exit-code 256: exit %d, want %d", code, exitUsage)
	}
}

// go-redis's own log lines (pool.go: failed to dial…) stay out of dlock's
// output: dlock says once, in its words, that Redis cannot be reached.
func TestRun_UnreachableRedisIsReportedOnce(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	code, _, stderr := runDlock(t, "redis://"+addr, "run", "job", "--", "true")
	if code != exitRedis || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "dlock run: cannot reach Redis") {
		t.Fatalf("exit %d, stderr:\n%s\nwant %d and one line of dlock's", code, stderr, exitRedis)
	}
}

// Item 12 on a cluster: a user granted what the README lists for one runs
// commands, given one node's address or every node's.
func TestRun_OnAClusterAsAUserWithTheDocumentedRights(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.UserArgs("locks", "pw", redistest.ClusterACL)...)
	var urls []string
	for _, addr := range cluster.Addrs() {
		urls = append(urls, "redis://locks:pw@"+addr)
	}
	for what, url := range map[string]string{"every node": strings.Join(urls, ","), "one node": urls[0]} {
		if code, stdout, stderr := runDlock(t, url, "run", "acl-cluster-job", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
			t.Fatalf("%s: exit %d, %q\n%s", what, code, stdout, stderr)
		}
	}
}

// Issue 36.5: when Redis can no longer be reached, the run acts on the loss
// at the lease's deadline (the command gets SIGTERM then), not seconds
// later: a second run may take the lock from then on.
func TestRun_UnreachableRedisStopsTheCommandAtTheLeasesDeadline(t *testing.T) {
	for _, how := range []string{"killed", "stalled"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			ready, stopped := fifo(t, "ready"), filepath.Join(t.TempDir(), "stopped")
			p := startDlock(t, "redis://"+srv.Addr(), "", "run", "--ttl", "2s", "--kill-grace", "1s", "deadline", "--",
				"sh", "-c", `trap 'date +%s%N > "$2"; exit 1' TERM; echo go > "$1"; while :; do sleep 0.05; done`, "sh", ready, stopped)
			readFifo(t, ready, 15*time.Second)
			// The lease was renewed at most TTL/3 before; its deadline is at
			// most 2s after this moment.
			cut := time.Now()
			if how == "killed" {
				srv.Kill()
			} else {
				srv.Pause()
				t.Cleanup(srv.Resume)
			}
			if code := p.wait(t, 30*time.Second); code != exitLost {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, exitLost, &p.stderr)
			}
			if strings.Contains(p.stderr.String(), "dlock was stopped") {
				t.Fatalf("Redis %s blamed on a stop of dlock:\n%s", how, &p.stderr)
			}
			// The command ends at once on SIGTERM: dlock has nothing left to
			// wait for.
			took := time.Since(cut)
			t.Logf("exit 76 %v after Redis was %s", took, how)
			if took > 3500*time.Millisecond {
				t.Fatalf("dlock exited %v after Redis was %s, want about the TTL (2s)\nstderr: %s", took, how, &p.stderr)
			}
			data, err := os.ReadFile(stopped)
			ns, err2 := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			if err != nil || err2 != nil {
				t.Fatalf("the command got no SIGTERM: %v %v\nstderr: %s", err, err2, &p.stderr)
			}
			// 2s is the latest deadline; 0.5s is for a loaded machine.
			if late := time.Unix(0, ns).Sub(cut); late > 2500*time.Millisecond {
				t.Fatalf("the command got SIGTERM %v after Redis was %s, want within the TTL (2s)\nstderr: %s", late, how, &p.stderr)
			}
		})
	}
}

// Issue 36.4: with stderr not a terminal (a CI log), a run says once that it
// waits and who holds the lock, and once that it has the lock.
func TestRun_WaitingOutsideATerminalIsReportedOnceAndSoIsTheAcquisition(t *testing.T) {
	url, locks := testRedis(t)
	ctx := context.Background()
	held, err := locks.RWMutex("ci", dlock.WithHolderInfo(admin.HolderInfo{Hostname: "host-a", PID: 7})).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "stderr")
	stderr, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	p := &dlockProcess{cmd: exec.Command(dlockBin, "run", "ci", "--", "echo", "ran"), exited: make(chan int, 1)}
	p.cmd.Env = append(os.Environ(), "REDIS_URL="+url)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	go func() {
		_ = p.cmd.Wait()
		p.exited <- p.cmd.ProcessState.ExitCode()
	}()
	read := func() string { data, _ := os.ReadFile(log); return string(data) }
	waitFor(t, 15*time.Second, "a line saying the run waits", func() bool { return strings.Contains(read(), "\n") })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 0 || p.stdout.String() != "ran\n" {
		t.Fatalf("exit %d, stdout %q\nstderr: %s", code, &p.stdout, read())
	}
	lines := strings.Split(strings.TrimSuffix(read(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `dlock run: waiting for "ci", held by host-a pid 7 (write ×1)`) ||
		!strings.HasPrefix(lines[1], `dlock run: acquired "ci" after `) {
		t.Fatalf("stderr:\n%s\nwant a line saying the run waits, and for whom, then one saying it acquired the lock", read())
	}
}

// Issue 36.4: on a terminal narrower than the waiting line, the line is cut
// to the width, so that each redraw replaces it instead of adding a line.
func TestRun_TheWaitingLineFitsANarrowTerminal(t *testing.T) {
	url, locks := testRedis(t)
	held, err := locks.RWMutex("narrow", dlock.WithOwner("a-rather-long-host-name.example.com/pid-1234/0123abcd")).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	term := startTerminalOfWidth(t, 60, fmt.Sprintf("%s run --redis %s narrow -- true\nsleep 600\n", dlockBin, url))
	term.waitScreen("for 3s")
	if n := strings.Count(term.screen(), "dlock"); n != 1 {
		t.Fatalf("the waiting line shows %d times, want once:\n%s", n, term.screen())
	}
}

// Issue 36.6: flock(1)'s short flags: -n (try once), -w SECONDS or a
// duration, -s (shared), -E N (the busy exit code).
func TestRun_FlocksShortFlags(t *testing.T) {
	url, locks := testRedis(t)
	held, err := locks.RWMutex("short", dlock.WithOwner("host-a/pid-7")).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	for _, args := range [][]string{{"-n"}, {"-w", "0.3"}, {"-w", "300ms"}, {"-s", "-n"}} {
		code, _, stderr := runDlock(t, url, append(append([]string{"run"}, args...), "short", "--", "true")...)
		if code != exitNotAcquired || !strings.Contains(stderr, "busy") {
			t.Errorf("run %v on a held lock: exit %d, want %d\n%s", args, code, exitNotAcquired, stderr)
		}
	}
	if code, _, stderr := runDlock(t, url, "run", "-n", "-E", "3", "short", "--", "true"); code != 3 {
		t.Errorf("run -n -E 3 on a held lock: exit %d, want 3\n%s", code, stderr)
	}
	if code, stdout, stderr := runDlock(t, url, "run", "-n", "-s", "other", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Errorf("run -n -s on a free lock: exit %d, %q\n%s", code, stdout, stderr)
	}
	code, help, _ := runDlock(t, url, "run", "--help")
	for _, want := range []string{"  -n\n", "  -s, --shared\n", "  -w, --wait duration\n", "  -E, --conflict-exit-code N\n", "  --permits N\n"} {
		if code != 0 || !strings.Contains(help, want) {
			t.Errorf("run --help does not list %q:\n%s", want, help)
		}
	}
}

// Issue 36.6: --permits N runs under a Semaphore of N permits, as consul
// lock -n N: N runs at once, the next one is busy.
func TestRun_PermitsRunsUnderASemaphore(t *testing.T) {
	url, locks := testRedis(t)
	first, second := fifo(t, "first"), fifo(t, "second")
	finish := []string{fifo(t, "finish-a"), fifo(t, "finish-b")}
	a := startDlock(t, url, "", "run", "--permits", "2", "pool", "--", "sh", "-c", `echo a > "$1"; cat "$2"`, "sh", first, finish[0])
	readFifo(t, first, 15*time.Second)
	b := startDlock(t, url, "", "run", "--permits", "2", "pool", "--", "sh", "-c", `echo b > "$1"; cat "$2"`, "sh", second, finish[1])
	readFifo(t, second, 15*time.Second)
	info, err := locks.Describe(context.Background(), "pool")
	if err != nil || info.Kind != observe.KindSemaphore || info.Permits != 2 {
		t.Fatalf("with two runs: %+v, %v; want a Semaphore of 2 permits", info, err)
	}
	code, _, stderr := runDlock(t, url, "run", "--permits", "2", "-n", "pool", "--", "true")
	if code != exitNotAcquired || !strings.Contains(stderr, "2 of 2 permits") {
		t.Fatalf("a third run: exit %d, want %d saying the permits are taken\n%s", code, exitNotAcquired, stderr)
	}
	for _, f := range finish {
		if err := os.WriteFile(f, []byte("done\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*dlockProcess{a, b} {
		if code := p.wait(t, 15*time.Second); code != 0 {
			t.Fatalf("exit %d\n%s", code, &p.stderr)
		}
	}
	if code, _, stderr := runDlock(t, url, "run", "--permits", "2", "--shared", "pool", "--", "true"); code != exitUsage {
		t.Fatalf("--permits with --shared: exit %d, want %d\n%s", code, exitUsage, stderr)
	}
}

// Issue 36.10: a run on a name another lock type holds (a Go program's
// Mutex, a Semaphore) says which type holds it and how to take that type,
// not that the key holds what dlock did not write; and says "dlock" once.
func TestRun_ANameHeldAsAnotherTypeIsNamedSo(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	must(locks.Mutex("m").Lock(ctx))
	must(locks.Semaphore("s", 2).Acquire(ctx))
	must(locks.RWMutex("rw").Lock(ctx))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "m", "--", "true"}, `dlock run: "m" is a Mutex (or a FairMutex with nobody queued, or a MultiLock's part), held: dlock run takes an RWMutex`},
		{[]string{"run", "s", "--", "true"}, `dlock run: "s" is a Semaphore, shared: dlock run takes an RWMutex; --permits N takes a Semaphore`},
		{[]string{"run", "--permits", "2", "rw", "--", "true"}, `dlock run: "rw" is an RWMutex (or a ReentrantMutex), held: dlock run --permits takes a Semaphore`},
	} {
		code, _, stderr := runDlock(t, url, tc.args...)
		if code != exitFailure || !strings.HasPrefix(stderr, tc.want) || strings.Contains(stderr, "did not write") ||
			strings.Count(stderr, "dlock") != strings.Count(tc.want, "dlock") {
			t.Errorf("dlock %q: exit %d, stderr:\n%s\nwant %d and:\n%s", tc.args, code, stderr, exitFailure, tc.want)
		}
	}
}

// A run's owner id joins its hold (WithOwner). Status shows its hash, and
// the run's host and pid: 128 random bits keep the id from being guessed
// back from them.
func TestRun_OwnerIDCannotBeGuessedFromWhatStatusShows(t *testing.T) {
	id := ownerID()
	random := id[strings.LastIndex(id, "/")+1:]
	if len(random) < 32 || id == ownerID() {
		t.Fatalf("owner id %q: want 128 random bits (32 hex digits) after the host and pid", id)
	}
}

// A run whose --permits differs from the Semaphore's number in Redis is a
// mismatch to fix, not an unreachable Redis (it exited 69).
func TestRun_PermitsOtherThanTheSemaphoresFailsNotAsUnreachable(t *testing.T) {
	url, locks := testRedis(t)
	mustLease(t)(locks.Semaphore("pool", 2).Acquire(context.Background()))
	code, _, stderr := runDlock(t, url, "run", "--permits", "3", "-n", "pool", "--", "true")
	if code != exitFailure || !strings.Contains(stderr, "permits") {
		t.Fatalf("--permits 3 on a Semaphore of 2: exit %d, want %d\n%s", code, exitFailure, stderr)
	}
}

// Issue 36 (D2): flock's short flags group as getopt groups them: switches
// together (-ns), the last one taking its value from the rest of the word
// or the next (-nE 0, -nE3, -w0.3). A group never hides in a flag's value
// (--info -nE), and a letter that is no flag is refused, not guessed.
func TestRun_GroupedShortFlags(t *testing.T) {
	url, locks := testRedis(t)
	mustLease(t)(locks.RWMutex("short", dlock.WithOwner("host-a/pid-7")).Lock(context.Background()))
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-ns"}, exitNotAcquired},
		{[]string{"-sn"}, exitNotAcquired},
		{[]string{"-nE", "0"}, 0},
		{[]string{"-nE3"}, 3},
		{[]string{"-sw0.3"}, exitNotAcquired},
		{[]string{"-snE", "4"}, 4},
	} {
		code, stdout, stderr := runDlock(t, url, append(append([]string{"run"}, tc.args...), "short", "--", "echo", "ran")...)
		if code != tc.code || stdout != "" {
			t.Errorf("run %q on a held lock: exit %d, stdout %q, want %d\n%s", tc.args, code, stdout, tc.code, stderr)
		}
	}
	if code, stdout, stderr := runDlock(t, url, "run", "--info", "-nE", "free", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Errorf("run --info -nE free: exit %d, %q, want the note -nE\n%s", code, stdout, stderr)
	}
	code, stdout, stderr := runDlock(t, url, "run", "-nz", "short", "--", "echo", "ran")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "-nz") {
		t.Errorf("run -nz: exit %d, stdout %q, want %d naming -nz\n%s", code, stdout, exitUsage, stderr)
	}
}
