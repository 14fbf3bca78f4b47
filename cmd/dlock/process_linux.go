package main

import (
	"bytes"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// becomeSubreaper makes this process, dlock or the guard, the parent of
// the orphans of the processes below it: none of the command's processes
// then leaves the guard's reach, whatever group or session it moves to.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, <linux/prctl.h>

// commandProcesses are the living processes of the command but this one,
// dlock or the guard: those below it, found by their parents in /proc, and
// those of the command's process group, which --release-on-exit leaves to
// init. Zombies are left out: they run no more.
func commandProcesses(group int) []int {
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
		if len(fields) < 3 || fields[0] == "Z" {
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
	for next := []int{self}; len(next) > 0; {
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

// signalAll sends sig to every process of the command but this one, and
// returns to how many it did.
func signalAll(group int, sig syscall.Signal) int {
	n := 0
	for _, pid := range commandProcesses(group) {
		if syscall.Kill(pid, sig) == nil {
			n++
		}
	}
	return n
}

// processName is the name ps shows for process pid (its comm).
func processName(pid int) string {
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSuffix(string(comm), "\n")
}

// waitForGroup has nothing to wait for here: the processes the command
// left are the guard's children, which it reaps as they end.
func waitForGroup() {}

// suspend follows the command's stop on ^Z: dlock stops too, as the shell's
// job it is, and when continued resumes the command, with the terminal if
// fg made dlock the foreground again. Without a job-control shell above
// it (its group orphaned, where the kernel discards SIGTSTP anyway), dlock
// just continues the command: ^Z does nothing, as for any program run
// without job control. Stopped, dlock does not renew the lock: stopped past
// the TTL, the run ends lost (exit 76).
func suspend(tty, pgid int) {
	setForeground(tty, syscall.Getpgrp())
	if underJobControl() {
		// Go handles SIGTSTP on a thread of its own: dlock is stopped some
		// time after kill returns, and knows it is running again by SIGCONT.
		continued := make(chan os.Signal, 1)
		signal.Notify(continued, syscall.SIGCONT)
		_ = syscall.Kill(0, syscall.SIGTSTP)
		<-continued
		signal.Stop(continued)
	}
	if fg, err := terminalGroup(tty); err == nil && fg == syscall.Getpgrp() {
		setForeground(tty, pgid)
	}
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
}

// underJobControl says whether a shell that controls jobs started dlock:
// its parent is in its session but in another process group.
func underJobControl() bool {
	parent := syscall.Getppid()
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(parent), 0, 0)
	own, _, errno2 := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	pgid, err := syscall.Getpgid(parent)
	return errno == 0 && errno2 == 0 && err == nil && sid == own && pgid != syscall.Getpgrp()
}

// nameProcess sets the name ps and top show (comm), else the file dlock
// was started from: exe, for /proc/self/exe. /proc/self/comm is the main
// thread's whichever thread writes it; prctl(PR_SET_NAME) would name the
// thread the goroutine happens to run on.
func nameProcess(name string) {
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
}
