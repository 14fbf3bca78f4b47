package main

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The guard compares the lease's deadline on CLOCK_BOOTTIME, which no
// one sets: a step of the wall clock while dlock is stopped does not move
// the guard's kill. The deadline file holds it in that clock's terms, as
// the guard, another process, reads its own CLOCK_BOOTTIME: on the wall
// clock (time.Now().UnixNano()) the file's value would be some 10^18 ns
// from it, and a step would move it.
func TestGuard_TheDeadlineFileIsOnTheBootClock(t *testing.T) {
	f, err := tempFile()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := writeDeadline(f, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	var b [16]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	left := time.Duration(int64(binary.LittleEndian.Uint64(b[:8])) - ts.Nano())
	if left <= 2*time.Second || left > 5*time.Second {
		t.Fatalf("the file's deadline is %v from CLOCK_BOOTTIME, want 5s at most and not much less", left)
	}
	if read := untilDeadline(f); read <= 2*time.Second || read > 5*time.Second {
		t.Fatalf("untilDeadline read %v back, want about 5s", read)
	}
}
