package main

import (
	"regexp"
	"strings"
	"testing"
)

// A flag error names the one rule broken and points to --help: two lines on
// stderr, nothing on stdout, exit 2. Not the whole help text.
func TestCLI_AFlagErrorNamesTheRuleAndPointsToHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		rule string // the first line of stderr
		help string // the command whose help the second line points to
	}{
		{[]string{"run", "-z", "job", "--", "true"}, "dlock run: flag provided but not defined: -z", "dlock run"},
		{[]string{"run", "job", "--bogus", "--", "true"}, "dlock run: flag provided but not defined: -bogus", "dlock run"},
		{[]string{"run", "--wait", "soon", "job", "--", "true"}, `dlock run: invalid value "soon" for flag -wait: want a duration of 0 or more, such as 30s or 10m, or seconds`, "dlock run"},
		{[]string{"run", "job"}, "dlock run: want NAME -- COMMAND [ARGS...]", "dlock run"},
		// Issue 36.3: not a lock named "echo" running hi.
		{[]string{"run", "--", "echo", "hi"}, `dlock run: no NAME before "--": want [flags] NAME -- COMMAND [ARGS...]`, "dlock run"},
		{[]string{"run", "--wait", "0", "--", "echo", "hi"}, `dlock run: no NAME before "--": want [flags] NAME -- COMMAND [ARGS...]`, "dlock run"},
		{[]string{"status"}, "dlock status: want one lock NAME", "dlock status"},
		{[]string{"status", "--jsn", "x"}, "dlock status: flag provided but not defined: -jsn", "dlock status"},
		{[]string{"unlock", "x"}, "dlock unlock: want --force and one lock NAME", "dlock unlock"},
		{[]string{"demo", "--workers", "0"}, "dlock demo: --workers must be at least 1", "dlock demo"},
		{[]string{"bench", "--type", "Spinlock"}, "dlock bench: --type is one of Mutex, ReentrantMutex, RWMutex, FairMutex, Semaphore, MultiLock, Election, not \"Spinlock\"", "dlock bench"},
		{[]string{"version", "--short"}, "dlock version: flag provided but not defined: -short", "dlock version"},
		{[]string{"frobnicate"}, `dlock: unknown command "frobnicate"`, "dlock"},
		{[]string{"--bogus", "status", "x"}, "dlock: flag provided but not defined: -bogus", "dlock"},
	} {
		code, stdout, stderr := runDlock(t, "redis://127.0.0.1:1", tc.args...)
		want := tc.rule + "\nRun '" + tc.help + " --help' for usage.\n"
		if code != exitUsage || stdout != "" || stderr != want {
			t.Errorf("dlock %q: exit %d, stdout %q, stderr:\n%s\nwant exit %d, no stdout, stderr:\n%s",
				tc.args, code, stdout, stderr, exitUsage, want)
		}
	}
}

// Flags that come before the command are the whole program's: --redis
// there is every command's --redis.
func TestCLI_GlobalRedisFlagBeforeTheCommand(t *testing.T) {
	url, _ := testRedis(t)
	// REDIS_URL points nowhere: only the flag can make these work.
	if code, stdout, stderr := runDlock(t, "redis://127.0.0.1:1", "--redis", url, "status", "x"); code != 0 || !strings.Contains(stdout, "free") {
		t.Fatalf("dlock --redis URL status x: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runDlock(t, "redis://127.0.0.1:1", "--redis="+url, "run", "x", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Fatalf("dlock --redis=URL run x -- echo ran: exit %d\n%s%s", code, stdout, stderr)
	}
	// The command's own --redis, given after it, wins.
	if code, _, stderr := runDlock(t, "", "--redis", "redis://127.0.0.1:1", "status", "--redis", url, "x"); code != 0 {
		t.Fatalf("a command's --redis after the global one: exit %d\n%s", code, stderr)
	}
	if code, stdout, _ := runDlock(t, "", "--help"); code != 0 || !strings.Contains(stdout, "Usage:") {
		t.Fatalf("dlock --help: exit %d\n%s", code, stdout)
	}
	if code, stdout, _ := runDlock(t, "", "--version"); code != 0 || !strings.HasPrefix(stdout, "dlock ") {
		t.Fatalf("dlock --version: exit %d\n%s", code, stdout)
	}
}

// Every flag that takes a length of time says so in the same word.
func TestCLI_HelpCallsEveryTimeFlagADuration(t *testing.T) {
	timeFlags := map[string][]string{
		"run":   {"ttl", "wait", "kill-grace"},
		"demo":  {"duration"},
		"bench": {"duration", "hold"},
		"watch": {"interval"},
	}
	for command, flags := range timeFlags {
		code, stdout, _ := runDlock(t, "", command, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d", command, code)
		}
		for _, name := range flags {
			line := regexp.MustCompile(`(?m)^  (-[a-zA-Z], )?--` + name + ` duration$`)
			if !line.MatchString(stdout) {
				t.Errorf("%s --help does not list \"--%s duration\":\n%s", command, name, stdout)
			}
		}
		if usage, _, _ := strings.Cut(stdout, "\n"); strings.Contains(usage, " D]") || strings.Contains(usage, " D ") {
			t.Errorf("%s --help: the usage line names a duration D: %s", command, usage)
		}
	}
}

func TestBench_HelpListsEveryType(t *testing.T) {
	_, stdout, _ := runDlock(t, "", "bench", "--help")
	for _, lockType := range lockTypes {
		if !strings.Contains(stdout, lockType) {
			t.Errorf("bench --help does not name %s:\n%s", lockType, stdout)
		}
	}
}

// Issue 36 (D1): consul's habit, -n N before the name, is not flock's -n
// (try once) followed by a lock named N running the name as a command: it
// exits 2, pointing to --permits N, and runs nothing.
func TestRun_ConsulsDashNWithANumberIsAUsageError(t *testing.T) {
	url, _ := testRedis(t)
	for _, args := range [][]string{
		{"run", "-n", "3", "backups", "--", "echo", "ran"},
		{"run", "-n", "3", "--", "echo", "ran"},
		{"run", "-n=3", "backups", "--", "echo", "ran"},
		{"run", "backups", "-n", "3", "--", "echo", "ran"},
		{"run", "-n3", "backups", "--", "echo", "ran"},
		{"run", "-sn3", "backups", "--", "echo", "ran"},
	} {
		code, stdout, stderr := runDlock(t, url, args...)
		refused := strings.Contains(stderr, `-n takes no value, not "3"`) || strings.Contains(stderr, `"3" for -n`)
		if code != exitUsage || stdout != "" || !refused || !strings.Contains(stderr, "--permits N") {
			t.Errorf("dlock %q: exit %d, stdout %q, stderr:\n%s\nwant %d, nothing run, a pointer to --permits N",
				args, code, stdout, stderr, exitUsage)
		}
	}
	if code, stdout, stderr := runDlock(t, url, "run", "--permits", "3", "-n", "backups", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Errorf("run --permits 3 -n backups: exit %d, %q\n%s", code, stdout, stderr)
	}
}

// Issue 36 (D3): --permits takes 1 or more, up to what a Semaphore keeps
// exactly (2^53-1); 0 ran under an RWMutex, and a number past 2^53 was
// stored rounded.
func TestRun_PermitsOutOfRangeIsAUsageError(t *testing.T) {
	url, _ := testRedis(t)
	for _, permits := range []string{"0", "-1", "9007199254740992", "99999999999999999999", "many"} {
		code, stdout, stderr := runDlock(t, url, "run", "--permits", permits, "pool", "--", "echo", "ran")
		want := `dlock run: invalid value "` + permits + `" for flag -permits: want a number of permits from 1 to 9007199254740991`
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, want) {
			t.Errorf("--permits %s: exit %d, stdout %q, stderr:\n%s\nwant %d, nothing run, and:\n%s", permits, code, stdout, stderr, exitUsage, want)
		}
	}
	if code, stdout, stderr := runDlock(t, url, "run", "--permits", "9007199254740991", "pool", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Errorf("--permits 2^53-1: exit %d, %q\n%s", code, stdout, stderr)
	}
}

// Issue 36: -E (--conflict-exit-code) says what it takes, an exit code
// from 0 to 255, not the flag package's "parse error".
func TestRun_ConflictExitCodeSaysWhatItTakes(t *testing.T) {
	url, _ := testRedis(t)
	for _, args := range [][]string{
		{"run", "-E", "x", "j", "--", "echo", "ran"},
		{"run", "-nE", "x", "j", "--", "echo", "ran"},
		{"run", "--conflict-exit-code", "256", "j", "--", "echo", "ran"},
	} {
		code, stdout, stderr := runDlock(t, url, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "an exit code from 0 to 255") || strings.Contains(stderr, "parse error") {
			t.Errorf("dlock %q: exit %d, stdout %q, stderr:\n%s\nwant %d, a refusal saying what -E takes", args, code, stdout, stderr, exitUsage)
		}
	}
}
