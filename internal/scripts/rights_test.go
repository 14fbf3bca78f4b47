package scripts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// SCRIPT_COMMANDS in common.lua must name every command the scripts run on
// keys: rights_refused checks them before an acquire writes anything, and
// one it missed could be refused after a write (see common.lua).
func TestScripts_RightsCoverEveryCommand(t *testing.T) {
	list := regexp.MustCompile(`(?s)local SCRIPT_COMMANDS = \{(.*?)\}`).FindStringSubmatch(common)
	if list == nil {
		t.Fatal("no SCRIPT_COMMANDS in common.lua")
	}
	checked := map[string]bool{}
	for _, m := range regexp.MustCompile(`'([a-z]+)'`).FindAllStringSubmatch(list[1], -1) {
		checked[m[1]] = true
	}
	files, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	run := regexp.MustCompile(`(?:redis\.p?call\(|call_on\([^,]+, )'([A-Z]+)'`)
	for _, file := range files {
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range run.FindAllStringSubmatch(string(body), -1) {
			if command := strings.ToLower(m[1]); !checked[command] {
				t.Errorf("%s runs %s, which SCRIPT_COMMANDS does not name", file, m[1])
			}
		}
	}
}
