package scripts

import (
	"regexp"
	"strings"
	"testing"
)

// An acquire's rights_refused (common.lua) must check every command its lock
// type's scripts run on keys, before it writes anything: one it missed
// could be refused part-way through a later script (see rightsFor).
func TestScripts_RightsCoverEveryCommand(t *testing.T) {
	listed := regexp.MustCompile(`local SCRIPT_COMMANDS = \{(.*?)\}`)
	run := regexp.MustCompile(`(?:redis\.p?call\(|call_on\([^,]+, )'([A-Z]+)'`)
	for _, set := range typeScripts {
		checked, acquires := map[string]bool{}, 0
		for _, s := range set {
			if m := listed.FindStringSubmatch(sources[s]); m != nil {
				acquires++
				for _, c := range regexp.MustCompile(`'([a-z]+)'`).FindAllStringSubmatch(m[1], -1) {
					checked[c[1]] = true
				}
			}
		}
		if acquires == 0 {
			continue // an operator's script (Describe, ForceUnlock) takes nothing
		}
		for _, s := range set {
			for _, m := range run.FindAllStringSubmatch(sources[s], -1) {
				if command := strings.ToLower(m[1]); !checked[command] {
					t.Errorf("script %s runs %s, which its type's acquire does not check", s.Hash()[:8], m[1])
				}
			}
		}
	}
}

// A command named by a variable escapes the rights check: only PUBLISH
// or SPUBLISH (as the client says) goes so, on a channel, not a key.
func TestScripts_RunCommandsByName(t *testing.T) {
	byVariable := regexp.MustCompile(`redis\.p?call\(([A-Za-z_][\w\[\]]*), ([\w.]+)`)
	channel := regexp.MustCompile(`(?i)chan|observers`)
	for s, src := range sources {
		for line := range strings.SplitSeq(src, "\n") {
			for _, m := range byVariable.FindAllStringSubmatch(uncommented(line), -1) {
				if !channel.MatchString(m[2]) {
					t.Errorf("script %s runs a command named by %s on %s, not a channel", s.Hash()[:8], m[1], m[2])
				}
			}
		}
	}
}
