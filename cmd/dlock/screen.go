package main

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// terminalScreen is a screen of watch's own on the terminal (the alternate
// screen, as less and top use), left as the terminal was when it ends.
type terminalScreen struct {
	out  *os.File
	quit chan struct{} // closed when q is pressed
}

// enterScreen switches out to a screen of its own with the cursor hidden,
// and, when keyboard is a terminal, reads keys from it one at a time (q
// closes quit). restore reads no more keys and gives the terminal back as
// it was: its modes, its cursor, the screen before.
func enterScreen(out, keyboard *os.File) (screen *terminalScreen, restore func()) {
	screen = &terminalScreen{out: out, quit: make(chan struct{})}
	screen.write("\033[?1049h\033[?25l")
	stopKeys := func() {}
	if keyboard != nil {
		stopKeys = screen.readKeys(keyboard)
	}
	return screen, func() {
		stopKeys()
		screen.write("\033[?25h\033[?1049l")
	}
}

func (s *terminalScreen) write(text string) { _, _ = s.out.WriteString(text) }

// size is the terminal's width and height; 80×24 when it does not say.
func (s *terminalScreen) size() (width, height int) {
	width, height, err := windowSize(int(s.out.Fd()))
	if err != nil || width <= 0 || height <= 0 {
		return 80, 24
	}
	return width, height
}

// readKeys reads keyboard a key at a time until stop is called, closing
// quit at q. Ctrl-C stays a signal (the terminal's ISIG is kept), which
// ends watch through its context.
func (s *terminalScreen) readKeys(keyboard *os.File) (stop func()) {
	fd := int(keyboard.Fd())
	restoreModes, err := keysAtATime(fd)
	if err != nil {
		return func() {} // q needs Enter then, or Ctrl-C alone ends watch
	}
	done, finished := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(finished)
		key := make([]byte, 16)
		for {
			select {
			case <-done:
				return
			default:
			}
			// keysAtATime makes a read return within a tenth of a second,
			// key or not, so that stop is seen.
			n, err := syscall.Read(fd, key)
			if err != nil && !errors.Is(err, syscall.EINTR) && !errors.Is(err, syscall.EAGAIN) {
				return
			}
			for _, k := range key[:max(n, 0)] {
				if k == 'q' || k == 'Q' {
					once.Do(func() { close(s.quit) })
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		restoreModes()
	}
}
