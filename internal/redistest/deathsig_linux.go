package redistest

import "syscall"

// dieWithParent makes the server die with the test binary, even when it
// is killed or panics.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
