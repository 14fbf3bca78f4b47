package main

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// dieWithDlock has the kernel kill the command's main process when dlock
// dies, even by SIGKILL: a second line behind the guard, should the guard
// be killed too.
func dieWithDlock(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// becomeSubreaper makes dlock the parent of the orphans of the command's
// processes, so that groupGone can reap them: reparented to an init that
// does not reap (a container's, often), they would stay zombies, members of
// the group for ever.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, <linux/prctl.h>

// reapOrphans reaps whatever child of dlock has exited. Called only once
// the command's main process has been waited for, it takes no exit status
// anyone else waits for.
func reapOrphans() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

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
