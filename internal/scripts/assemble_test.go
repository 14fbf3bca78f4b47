package scripts

import (
	"regexp"
	"strings"
	"testing"
)

// Redis runs a script's whole text at every call, so a helper shipped and
// never called costs every call its closure: each script ships only the
// helpers it calls (assemble).
func TestScripts_ShipOnlyTheHelpersTheyCall(t *testing.T) {
	defined := regexp.MustCompile(`(?m)^local function ([A-Za-z_]\w*)`)
	for s, a := range assembled {
		src := a.src
		mentions := map[string]int{}
		for line := range strings.SplitSeq(src, "\n") {
			for _, name := range identifier.FindAllString(uncommented(line), -1) {
				mentions[name]++
			}
		}
		for _, m := range defined.FindAllStringSubmatch(src, -1) {
			if mentions[m[1]] < 2 {
				t.Errorf("script %s defines %s and never calls it", s.Hash()[:8], m[1])
			}
		}
	}
}

// A helper defined after a script's body (or unknown to it) would be a nil
// global there; the assembler keeps what the body and each kept helper
// mention, in the libraries' order.
func TestAssemble_KeepsWhatIsCalledTransitivelyInOrder(t *testing.T) {
	lib := "local A = 1\n-- b's comment\nlocal function b()\n  return A -- not c\nend\nlocal function c()\nend\nlocal function d()\n  return b()\nend\n"
	libraries[lib] = parseLibrary(lib)
	defer delete(libraries, lib)
	got := joined(assembleSegments([]string{lib, "return d() -- c\n"}))
	want := "local A = 1\nlocal function b()\n  return A -- not c\nend\nlocal function d()\n  return b()\nend\nreturn d() -- c\n"
	if got != want {
		t.Errorf("assembled:\n%s\nwant:\n%s", got, want)
	}
}
