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
// dlock or the guard: those below it, found by their parents in /proc
// (the guard's command, main, among them), but the children in foreign
// and what runs below them. Never by process group: the command runs in
// dlock's, which may be its caller's. Zombies are left out: they run no
// more (see running).
func commandProcesses(_ *os.Process, foreign foreignSet) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if !running(fields) {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var all []int
	next := slices.DeleteFunc(children[os.Getpid()], func(pid int) bool { return foreign[processID(pid)] })
	all = append(all, next...)
	for len(next) > 0 {
		pid := next[0]
		next = append(next[1:], children[pid]...)
		all = append(all, children[pid]...)
	}
	return all
}

// killAll kills every process of the command but this one, in rounds: a
// process forked meanwhile shows in the next. Once a round finds none it
// has not killed, it waits for those killed to end, polling less and less
// often: one in uninterruptible sleep (D) ends only when the sleep does,
// and may finish a write then. It returns those it may not kill (another
// user's: sudo, a set-user-ID program), which run on. main, the guard's
// command, is found in /proc like the rest.
func killAll(main *os.Process, foreign foreignSet) (unkilled []int) {
	killed := map[string]int{} // pids by pid and start time: a pid may be reused
	refused := map[string]int{}
	for fresh := true; fresh; {
		fresh = false
		for _, pid := range commandProcesses(main, foreign) {
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

// add adds dlock's children but guard, read while guard's main thread
// lives: until every thread of the guard has exited, its orphans go to a
// thread of its own, not to dlock. A reading made as the guard died may
// hold them, the command's: it is dropped (kill -9 of the guard).
func (f foreignSet) add(guard int) {
	born := processID(guard)
	if born == "" {
		return
	}
	var seen []string
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		list, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		for _, word := range strings.Fields(string(list)) {
			if pid, err := strconv.Atoi(word); err == nil && pid != guard {
				if id := processID(pid); id != "" {
					seen = append(seen, id)
				}
			}
		}
	}
	if !threadAlive(guard, born) {
		return
	}
	for _, id := range seen {
		f[id] = true
	}
}

// threadAlive says whether pid's main thread still runs (not Z or X),
// as the process born: its children are then not orphans yet.
func threadAlive(pid int, born string) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) >= 20 && fields[0] != "Z" && fields[0] != "X" && strconv.Itoa(pid)+"@"+fields[19] == born
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
// then must too: an ignored signal stays ignored across exec; otherwise
// the guard catches it before the command starts, which gets the default.
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
