package main

import (
	"os"
	"testing"
)

// Issue 36: a character device is not a terminal: dlock's stderr sent to
// /dev/null (or /dev/kmsg) got the waiting line's redraws, and watch its
// screen, where a plain line is due.
func TestIsTerminal_ACharacterDeviceIsNotOne(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Fatalf("isTerminal(%s) = true", os.DevNull)
	}
}
