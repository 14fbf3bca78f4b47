package scripts

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A layout's Lua locals and Go keys name the same positions.
func TestLayout_GoKeysAndLuaLocalsAgree(t *testing.T) {
	l := Layout{{Lua: "LOCK"}, {Lua: "FENCE", Suffix: ":fence"}}
	if got, want := l.locals(""), "local LOCK, FENCE = KEYS[1], KEYS[2]\n"; got != want {
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

// Every script of every type takes its KEYS by a layout, and no script
// indexes KEYS by a number: the layouts' locals (scriptOn, scriptOnParts)
// are the only Lua that does.
func TestScripts_NameEveryKeyByTheirLayout(t *testing.T) {
	for _, set := range typeScripts {
		for _, s := range set {
			if LayoutOf(s) == nil {
				t.Errorf("a script without a layout:\n%.300s", assembled[s].src[len(prelude):])
			}
		}
	}
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			code, _, _ := strings.Cut(line, "--")
			if strings.Contains(code, "KEYS[") {
				t.Errorf("%s:%d indexes KEYS: %s", name, i+1, line)
			}
		}
	}
}

// A script's own keys (PerCall) come where Go adds them: an attempt's
// tombstone once, anywhere (dlock's command puts it between the keys before and
// after it); a release's mark, then its tombstone, last (clientHold
// appends them). Go makes the rest once per handle.
func TestLayouts_PutTheCallsOwnKeysWhereGoAddsThem(t *testing.T) {
	for s, a := range assembled {
		layout := a.layout
		var own []string
		for i, k := range layout {
			if !k.PerCall {
				continue
			}
			own = append(own, k.Lua)
			if k == ReleaseMark && i != len(layout)-2 {
				t.Errorf("%v: the release mark is not last but the tombstone", layout)
			}
		}
		switch {
		case len(own) == 0, slices.Equal(own, []string{"TOMBSTONE"}):
		case slices.Equal(own, []string{"RELEASE_MARK", "TOMBSTONE"}):
			if layout[len(layout)-1] != Tombstone {
				t.Errorf("%v: a release's tombstone is not last", layout)
			}
		default:
			t.Errorf("%v (%.8s): own keys %v", layout, s.Hash(), own)
		}
	}
}

// A MultiLock script names a group's keys key by key (every lock's lock,
// then every lock's counter), then its tail.
func TestPartLocals_NameEachLocksKeysAndTheTail(t *testing.T) {
	got := partLocals(Layout{{Lua: "LOCK"}, {Lua: "FENCE", Suffix: ":fence"}}, Layout{Tombstone})
	want := "local N = math.floor(#KEYS / 2)\n" +
		"local function part(i)\n  return KEYS[i], KEYS[N + i]\nend\n" +
		"local LOCK_FROM, LOCK_TO, FENCE_FROM, FENCE_TO = 1, N, N + 1, 2 * N\n" +
		"local TOMBSTONE = KEYS[2 * N + 1]\n"
	if got != want {
		t.Errorf("partLocals:\n%s\nwant\n%s", got, want)
	}
	if l := RWLayout.Before("WWAIT"); len(l) != 2 || l[1].Lua != "HOLDS" {
		t.Errorf("RWLayout.Before(WWAIT) %v", l)
	}
	if l := RWLayout.Only("RCHAN"); len(l) != 1 || l[0].Suffix != RChannelSuffix {
		t.Errorf("RWLayout.Only(RCHAN) %v", l)
	}
	if l := RWLayout.Before("FENCE").Then(ReleaseMark); len(l) != len(RWLayout) || len(RWLayout) != 8 || l[7] != ReleaseMark {
		t.Errorf("Then: %v, and RWLayout %v", l, RWLayout)
	}
}
