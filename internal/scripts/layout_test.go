package scripts

import (
	"slices"
	"testing"
)

// A layout's Lua locals and Go keys name the same positions.
func TestLayout_GoKeysAndLuaLocalsAgree(t *testing.T) {
	l := Layout{{Lua: "LOCK"}, {Lua: "FENCE", Suffix: ":fence"}}
	if got, want := l.locals(), "local LOCK, FENCE = KEYS[1], KEYS[2]\n"; got != want {
		t.Errorf("locals %q, want %q", got, want)
	}
	if got, want := l.Keys("dlock:{a}"), []string{"dlock:{a}", "dlock:{a}:fence"}; !slices.Equal(got, want) {
		t.Errorf("Keys %q, want %q", got, want)
	}
	if i := l.Index("FENCE"); i != 1 {
		t.Errorf("Index(FENCE) %d, want 1", i)
	}
	if n := len(AnyLockLayout); n != len(RWLayout)+6 || !slices.Equal(AnyLockLayout[:len(RWLayout)], RWLayout) {
		t.Errorf("AnyLockLayout does not start with RWLayout: %v", AnyLockLayout)
	}
}
