package main

import (
	"bytes"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// becomeSubreaper makes this process, dlock or the guard, the parent of
// the orphans of the processes below it: none of the command's processes
// then leaves the guard's reach, whatever group or session it moves to.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, <linux/prctl.h>

// descendants are the living processes below process root, found by their
// parents in /proc. Zombies are left out: they run no more.
func descendants(root int) []int {
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
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var below []int
	for next := []int{root}; len(next) > 0; {
		pid := next[0]
		next = append(next[1:], children[pid]...)
		below = append(below, children[pid]...)
	}
	return below
}

// waitForGroup has nothing to wait for here: the processes the command
// left are the guard's children, reaped by reapAll.
func waitForGroup() {}

// signalOwnGroup does nothing here: the processes of the command's group
// are all below the guard, their subreaper.
func signalOwnGroup(syscall.Signal) {}

// commandStopped says whether process pid has stopped (^Z, or reading a
// terminal it does not own), taking that news from the kernel. waitid
// without WEXITED leaves the exit for os/exec's Wait.
func commandStopped(pid int) bool {
	var info [128]byte // siginfo_t; si_signo first, SIGCHLD when pid has stopped
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
		syscall.WSTOPPED|syscall.WNOHANG, 0, 0)
	return errno == 0 && *(*int32)(unsafe.Pointer(&info[0])) == int32(syscall.SIGCHLD)
}

const pPID = 1 // P_PID, <linux/wait.h>

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
