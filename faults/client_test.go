//go:build faults

package faults

func helperMain() bool { return false }
