package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dlockio/dlock"
)

// A terminal gives an East Asian wide or fullwidth character two columns,
// and a combining mark none: cutTo counts columns as it does, so that a
// line it cut fits the width it was cut to.
func TestCutTo_CountsColumnsAsATerminalDoes(t *testing.T) {
	for _, tc := range []struct {
		line  string
		width int
		want  string
	}{
		{"abcdef", 4, "abcd"},
		{"abc", 0, "abc"}, // no width known: whole
		{"锁锁锁", 4, "锁锁"},
		{"锁锁锁", 5, "锁锁"}, // half a wide character does not fit
		{"ａｂｃ", 2, "ａ"},  // fullwidth forms
		{"한국어", 4, "한국"},
		{"e\u0301e\u0301e\u0301", 2, "e\u0301e\u0301"}, // a combining accent takes no column
		{"🔒🔒", 3, "🔒"},
	} {
		got := cutTo(tc.line, tc.width)
		if got != tc.want {
			t.Errorf("cutTo(%q, %d) = %q, want %q", tc.line, tc.width, got, tc.want)
		}
		if tc.width > 0 && columns(got) > tc.width {
			t.Errorf("cutTo(%q, %d) takes %d columns", tc.line, tc.width, columns(got))
		}
	}
}

// Issue 36: the waiting line was cut to the terminal's width in runes, so
// a name of wide characters wrapped, and each redraw left a line behind
// (the redraw clears only the line the cursor is on).
func TestRun_AWaitingLineOfWideCharactersStaysOnOneLine(t *testing.T) {
	url, locks := testRedis(t)
	name := strings.Repeat("锁", 30)
	mustLease(t)(locks.RWMutex(name, dlock.WithOwner("other")).Lock(context.Background()))
	term := startTerminalOfWidth(t, 80, fmt.Sprintf("%s run --redis %s -w 2s %s -- true\necho exit:$?\nsleep 600\n", dlockBin, url, name))
	term.waitScreen("exit:75")
	if screen := term.screen(); strings.Contains(screen, "dlock: waiting") {
		t.Fatalf("the waiting line left lines behind:\n%s", screen)
	}
}

// columns is how many columns of a terminal s takes.
func columns(s string) int {
	n := 0
	for _, r := range s {
		n += runeColumns(r)
	}
	return n
}
