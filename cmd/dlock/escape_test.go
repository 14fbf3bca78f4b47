package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dlockio/dlock"
)

// Lock names, owner ids and holder info are written by whoever uses the
// lock (or has Redis): ls and status print none of their control
// characters raw, which would let them move the operator's cursor, retitle
// the terminal, or forge lines of the listing. They are shown escaped.
func TestLsAndStatus_PrintNoControlCharacterOfNamesOwnersOrHolderInfo(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	const (
		mutexName = "m\x1b[2J\u009b31m"
		rwName    = "rw\rforged line"
	)
	hostile := dlock.HolderInfo{Hostname: "h\x1b]0;owned\x07", Program: "p\nfree  Mutex", User: "u"}
	must(locks.Mutex(mutexName, dlock.WithHolderInfo(hostile)).Lock(ctx))
	must(locks.RWMutex(rwName, dlock.WithOwner("o\x1b[1A\x7f"), dlock.WithHolderInfo(hostile)).Lock(ctx))
	runs := [][]string{{"ls"}, {"status", mutexName}, {"status", rwName}}
	for _, args := range runs {
		code, stdout, stderr := runDlock(t, url, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, code, stderr)
		}
		for _, r := range stdout {
			if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
				t.Fatalf("%q printed the control character %U:\n%q", args, r, stdout)
			}
		}
		if !strings.Contains(stdout, `\x1b`) {
			t.Fatalf("%q does not show the escape it left out:\n%s", args, stdout)
		}
	}
}
