//go:build !linux

package main

import "errors"

var errNoTerminalModes = errors.New("terminal modes are set on Linux only")

// keysAtATime is Linux's only: elsewhere q is not read, and Ctrl-C ends watch.
func keysAtATime(int) (restore func(), err error) { return nil, errNoTerminalModes }

// windowSize is Linux's only: elsewhere the screen is taken for 80×24.
func windowSize(int) (width, height int, err error) { return 0, 0, errNoTerminalModes }
