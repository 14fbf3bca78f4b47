package main

import (
	"bytes"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// becomeSubreaper makes this process, dlock or the guard, the parent of
// the orphans of the processes below it: none of the command's processes
// then leaves the guard's reach, whatever group or session it moves to.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, <linux/prctl.h>

// commandProcesses are the living processes of the command but this one,
// dlock or the guard: those below it, found by their parents in /proc,
// but the children in foreign and what runs below them, and those of the
// command's process group, which --release-on-exit leaves to init.
// Zombies are left out: they run no more (see running).
func commandProcesses(group int, foreign foreignSet) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	var inGroup []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if !running(fields) {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
		if pgrp, err := strconv.Atoi(fields[2]); err == nil && pgrp == group {
			inGroup = append(inGroup, pid)
		}
	}
	self := os.Getpid()
	var all []int
	next := slices.DeleteFunc(children[self], func(pid int) bool { return foreign[processID(pid)] })
	all = append(all, next...)
	for len(next) > 0 {
		pid := next[0]
		next = append(next[1:], children[pid]...)
		all = append(all, children[pid]...)
	}
	for _, pid := range inGroup {
		if pid != self && !slices.Contains(all, pid) {
			all = append(all, pid)
		}
	}
	return all
}

// killAll kills every process of the command but this one, in rounds: a
// process forked meanwhile shows in the next. Once a round finds none it
// has not killed, it waits for those killed to end, polling less and less
// often: one in uninterruptible sleep (D) ends only when the sleep does,
// and may finish a write then. It returns those it may not kill (another
// user's: sudo, a set-user-ID program), which run on.
func killAll(group int, foreign foreignSet) (unkilled []int) {
	killed := map[string]int{} // pids by pid and start time: a pid may be reused
	refused := map[string]int{}
	for fresh := true; fresh; {
		fresh = false
		for _, pid := range commandProcesses(group, foreign) {
			id := processID(pid)
			if id == "" || killed[id] != 0 || refused[id] != 0 {
				continue
			}
			switch err := syscall.Kill(pid, syscall.SIGKILL); err {
			case nil:
				killed[id], fresh = pid, true
			case syscall.EPERM:
				refused[id] = pid
			}
		}
	}
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		for id, pid := range killed {
			if processID(pid) != id {
				delete(killed, id)
			}
		}
		if len(killed) == 0 {
			break
		}
		time.Sleep(pause) // nothing tells a process when another ends
	}
	for _, pid := range refused {
		unkilled = append(unkilled, pid)
	}
	slices.Sort(unkilled)
	return unkilled
}

// foreignSet holds processes dlock did not start, by processID: its
// children but the guard, seen while the guard lived. A subreaper, dlock
// is the parent of the command's orphans only once the guard has ended
// (they went to the guard before); until then each child but the guard
// is another's: one its parent left before exec'ing into dlock, or an
// orphan of such.
type foreignSet map[string]bool

// add adds dlock's children but guard, while guard lives: its orphans
// are not dlock's yet.
func (f foreignSet) add(guard int) {
	if processID(guard) == "" {
		return
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		list, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		for _, word := range strings.Fields(string(list)) {
			if pid, err := strconv.Atoi(word); err == nil && pid != guard {
				if id := processID(pid); id != "" {
					f[id] = true
				}
			}
		}
	}
}

// processID is pid and its start time, "" once pid is gone or a zombie.
func processID(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ppid ...: the start time is the 22nd field.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 20 || !running(fields) {
		return ""
	}
	return strconv.Itoa(pid) + "@" + fields[19]
}

// readTermios is the ioctl that reads a terminal's settings.
const readTermios = syscall.TCGETS

// running says whether the process of /proc/PID/stat's fields from the
// state on runs: not a zombie (Z), or one only for its main thread, which
// has exited while others run on (num_threads, the 20th field, counts it).
func running(fields []string) bool {
	if len(fields) < 18 {
		return false
	}
	return fields[0] != "Z" || fields[17] != "1" && fields[17] != "0"
}

// processName is pid's name (comm), escaped: "?" once it has ended.
func processName(pid int) string {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "?"
	}
	return printable(strings.TrimSuffix(string(comm), "\n"))
}

// sharedFile is a file in memory (memfd_create), shared with the guard:
// no temp dir needs to be writable. A temp file where it is refused.
func sharedFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("dlock-deadline", unix.MFD_CLOEXEC)
	if err != nil {
		return tempFile()
	}
	return os.NewFile(uintptr(fd), "dlock-deadline"), nil
}

// ignoreTTOU makes dlock ignore SIGTTOU for the run: a terminal set to
// stop background writers (stty tostop) would stop it on a line, and the
// lock lapse. It says whether dlock ignored it already, as the command
// then must too: the guard gives the command the default otherwise
// (defaultTTOU), as an ignored signal stays ignored across exec.
func ignoreTTOU() (ignored bool) {
	// signal.Ignored tells only of Go's own Ignore. The handler is a
	// struct sigaction's first field on every architecture.
	var action [8]uint64
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(syscall.SIGTTOU),
		0, uintptr(unsafe.Pointer(&action)), 8, 0, 0)
	signal.Ignore(syscall.SIGTTOU)
	return errno == 0 && action[0] == sigIgn
}

const sigIgn = 1 // SIG_IGN, <asm-generic/signal-defs.h>

// defaultTTOU gives SIGTTOU its default action, which the guard's command
// inherits. Go's signal.Reset would bring back the SIG_IGN inherited from
// dlock: the guard sets it itself. A zeroed struct sigaction is SIG_DFL,
// no flags, an empty mask, whatever the architecture's layout.
func defaultTTOU() {
	var action [8]uint64
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(syscall.SIGTTOU),
		uintptr(unsafe.Pointer(&action)), 0, 8, 0, 0)
}

// waitForGroup has nothing to wait for here: the processes the command
// left are the guard's children, which it reaps as they end.
func waitForGroup() {}

// suspend follows the command's stop by sig, as its shell's job, dlock's
// group, would stop (see docs/CLI.md):
//   - dlock's group has the terminal: the stop was reported while dlock
//     itself was stopped, and fg has brought it back; the command reads
//     the terminal, and is continued with it;
//   - the command's group has it: ^Z, and dlock stops with it (SIGTSTP),
//     the script that ran dlock too, giving the shell its job; but a stop
//     for reading it (SIGTTIN) was reported before the handover;
//   - another group has it: the run is in the background, and the command
//     stopped reading it: dlock stops as it would have (SIGTTIN), and
//     leaves the terminal to the shell.
//
// Without a job-control shell above (dlock's group orphaned, where the
// kernel discards SIGTSTP), dlock continues the command: ^Z does nothing.
// followForeground continues the command once dlock is continued.
func suspend(tty, group int, sig syscall.Signal) {
	own := syscall.Getpgrp()
	jobControl := !orphaned(own)
	// Read last: a shell's fg after it is missed, and stops the job again.
	fg, err := terminalGroup(tty)
	switch {
	case err != nil || fg == own || fg == group && sig == syscall.SIGTTIN || !jobControl:
		resume(tty, group)
		return
	case fg == group:
		setForeground(tty, own)
	}
	if sig != syscall.SIGTTIN {
		sig = syscall.SIGTSTP // SIGTTOU is ignored by dlock, SIGSTOP not the terminal's
	}
	_ = syscall.Kill(0, sig)
}

// orphaned says whether process group pgrp is orphaned: no process of it
// has its parent in another group of its session, as a job-control shell
// is to its jobs.
func orphaned(pgrp int) bool {
	sid := sessionOf(0)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if ppid, group := groupOf(pid); group == pgrp {
				if _, parentGroup := groupOf(ppid); parentGroup != pgrp && parentGroup != 0 && sessionOf(ppid) == sid {
					return false
				}
			}
		}
	}
	return true
}

// groupOf is pid's parent and process group, 0s once pid has ended.
func groupOf(pid int) (ppid, pgrp int) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 3 {
		return 0, 0
	}
	ppid, _ = strconv.Atoi(fields[1])
	pgrp, _ = strconv.Atoi(fields[2])
	return ppid, pgrp
}

// sessionOf is pid's session, -1 once pid has ended.
func sessionOf(pid int) int {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if errno != 0 {
		return -1
	}
	return int(sid)
}

// nameProcess sets the name ps and top show (comm), else the file dlock
// was started from: exe, for /proc/self/exe. /proc/self/comm is the main
// thread's whichever thread writes it; prctl(PR_SET_NAME) would name the
// thread the goroutine happens to run on.
func nameProcess(name string) {
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// bootClock is CLOCK_BOOTTIME in nanoseconds: dlock and the guard share
// it, no one sets it, and it runs on while the machine sleeps, as the
// lease's expiry in Redis does.
func bootClock() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return ts.Nano()
}

// groupStopped says whether every process of the guard's group but the
// guard is stopped, or has a stop signal pending: ^Z reaches them all at
// once, but they stop one by one.
func groupStopped() bool {
	self, group := os.Getpid(), syscall.Getpgrp()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if pgrp, err := strconv.Atoi(fields[2]); err != nil || pgrp != group || !running(fields) || fields[0] == "T" {
			continue
		}
		if !stopPending(pid) {
			return false
		}
	}
	return true
}

// stopPending says whether a stop signal waits to be taken by pid.
func stopPending(pid int) bool {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true // ended meanwhile
	}
	const stops = 1<<(syscall.SIGSTOP-1) | 1<<(syscall.SIGTSTP-1) | 1<<(syscall.SIGTTIN-1) | 1<<(syscall.SIGTTOU-1)
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, _ := strings.Cut(line, ":")
		if name == "SigPnd" || name == "ShdPnd" { // the thread's, the process's
			if bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && bits&stops != 0 {
				return true
			}
		}
	}
	return false
}
