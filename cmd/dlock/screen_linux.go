package main

import (
	"syscall"
	"unsafe"
)

// keysAtATime turns off the terminal's line editing and echo, so that a key
// is read as it is pressed and not shown, and makes a read return after a
// tenth of a second without one. Signals from keys (Ctrl-C) stay on.
// restore puts the modes back.
func keysAtATime(fd int) (restore func(), err error) {
	var before syscall.Termios
	if err := ioctl(fd, syscall.TCGETS, unsafe.Pointer(&before)); err != nil {
		return nil, err
	}
	modes := before
	modes.Lflag &^= syscall.ICANON | syscall.ECHO
	modes.Cc[syscall.VMIN], modes.Cc[syscall.VTIME] = 0, 1
	if err := ioctl(fd, syscall.TCSETS, unsafe.Pointer(&modes)); err != nil {
		return nil, err
	}
	return func() { _ = ioctl(fd, syscall.TCSETS, unsafe.Pointer(&before)) }, nil
}

// windowSize is the terminal's width and height in characters.
func windowSize(fd int) (width, height int, err error) {
	var size struct{ rows, cols, xpixels, ypixels uint16 } // struct winsize
	if err := ioctl(fd, syscall.TIOCGWINSZ, unsafe.Pointer(&size)); err != nil {
		return 0, 0, err
	}
	return int(size.cols), int(size.rows), nil
}

func ioctl(fd int, request uintptr, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), request, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}
