package dlock

import (
	"strings"
	"testing"

	"github.com/dlockio/dlock/internal/scripts"
)

// The scripts' key layouts name the keys Go's keys type names, so that a
// script reads each where the Go code that made the lock puts it.
func TestScriptLayouts_AgreeWithTheKeysOfALock(t *testing.T) {
	k := keysFor("p:", "n")
	rw, anyKeys := rwScriptKeys(k), anyLockKeys(k)
	for lua, want := range map[string]string{"STATE": k.lock, "WWAIT": k.waiters, "WCHAN": k.channel, "FENCE": k.fence} {
		if got := rw[scripts.RWLayout.Index(lua)]; got != want {
			t.Errorf("RWLayout's %s is %q, want %q", lua, got, want)
		}
	}
	for lua, want := range map[string]string{"FORCED": k.forced(), "HOLDER": k.holderInfo(), "FENCE": k.fence} {
		if got := anyKeys[scripts.AnyLockLayout.Index(lua)]; got != want {
			t.Errorf("AnyLockLayout's %s is %q, want %q", lua, got, want)
		}
	}
}

// A Client's tag has the length and start the scripts take it by.
func TestClientTag_HasTheFormTheScriptsRead(t *testing.T) {
	tag := newClientTag()
	if len(tag) != scripts.ClientTagChars || !strings.HasPrefix(tag, scripts.ProtocolTag) {
		t.Fatalf("tag %q; want %d characters starting with %q", tag, scripts.ClientTagChars, scripts.ProtocolTag)
	}
}
