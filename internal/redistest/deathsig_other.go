//go:build !linux

package redistest

import "syscall"

// dieWithParent has no Pdeathsig to set here: a server outlives a test
// binary that is killed.
func dieWithParent() *syscall.SysProcAttr { return nil }
