package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
)

// noControl fails the test if out holds a control character, or does not
// show the escape it left out.
func noControl(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range out {
		if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
			t.Fatalf("%s printed the control character %U:\n%q", what, r, out)
		}
	}
	if !strings.Contains(out, `\x1b`) {
		t.Fatalf("%s does not show the escape it left out:\n%s", what, out)
	}
}

// Lock names and holder info are written by whoever uses the lock (or has
// Redis): ls and status print none of their control characters raw, which
// would let them move the operator's cursor, retitle the terminal, or forge
// lines of the listing. They are shown escaped. (Owner ids are shown as
// their hash, and WithOwner takes printable ids only.)
func TestLsAndStatus_PrintNoControlCharacterOfNamesOwnersOrHolderInfo(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	const (
		mutexName = "m\x1b[2J\u009b31m"
		rwName    = "rw\rforged line"
	)
	hostile := admin.HolderInfo{Hostname: "h\x1b]0;owned\x07", Program: "p\nfree  Mutex", User: "u"}
	must(locks.Mutex(mutexName, dlock.WithHolderInfo(hostile)).Lock(ctx))
	must(locks.RWMutex(rwName, dlock.WithOwner("o"), dlock.WithHolderInfo(hostile)).Lock(ctx))
	runs := [][]string{{"ls"}, {"status", mutexName}, {"status", rwName}}
	for _, args := range runs {
		code, stdout, stderr := runDlock(t, url, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, code, stderr)
		}
		noControl(t, fmt.Sprintf("%q", args), stdout)
	}
}

// Issue 36.2: run's busy report and waiting line, and unlock --force's
// question, name a holder by its holder info, escaped: raw, a hostile one
// retitled the terminal, cleared it and forged the line the operator was
// asked to confirm.
func TestRunAndUnlock_PrintNoControlCharacterOfHolders(t *testing.T) {
	url, locks := testRedis(t)
	hostile := admin.HolderInfo{Hostname: "h\x1b]0;owned\a\x1b[2J", PID: 7}
	mustLease(t)(locks.RWMutex("d", dlock.WithHolderInfo(hostile)).Lock(context.Background()))

	code, _, stderr := runDlock(t, url, "run", "--wait", "0", "d", "--", "true")
	if code != exitNotAcquired {
		t.Fatalf("run on a held lock: exit %d\n%s", code, stderr)
	}
	noControl(t, "run's busy report", stderr)
	p := startDlock(t, url, "n\n", "unlock", "--force", "d")
	if code := p.wait(t, 15*time.Second); code != exitFailure {
		t.Fatalf("unlock answered no: exit %d\n%s", code, &p.stderr)
	}
	noControl(t, "unlock's question", p.stderr.String())

	term := startTerminal(t, fmt.Sprintf("%s run --redis %s d -- true\nsleep 600\n", dlockBin, url))
	term.waitScreen(`held by h\x1b]0;owned\a\x1b[2J pid 7`)
	if title := term.tmux("display", "-p", "#{pane_title}"); strings.Contains(title, "owned") {
		t.Fatalf("the waiting line retitled the terminal: %q", title)
	}
}

// encoding/json escapes C0 controls only: a C1 control (U+009B, a CSI) or a
// bidi override (U+202E) in a name or holder info reached a terminal that
// showed `ls --json` raw. The JSON outputs escape every rune that does not
// print, as \uXXXX, which a JSON reader decodes as it was.
func TestJSONOutputs_EscapeEveryRuneThatDoesNotPrint(t *testing.T) {
	url, locks := testRedis(t)
	ctx, must := context.Background(), mustLease(t)
	const name = "m\u009b2J"
	must(locks.Mutex(name, dlock.WithHolderInfo(admin.HolderInfo{Program: "p\u202eevil"})).Lock(ctx))
	for _, args := range [][]string{{"ls", "--json"}, {"status", "--json", name}} {
		code, stdout, stderr := runDlock(t, url, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, code, stderr)
		}
		if strings.ContainsAny(stdout, "\u009b\u202e") || !strings.Contains(stdout, `\u009b`) || !strings.Contains(stdout, `\u202e`) {
			t.Errorf("%q printed a rune that does not print raw, or not escaped:\n%q", args, stdout)
		}
	}
}

// Issue 36: a command that cannot start is named escaped, and a huge name
// (of the command or the lock) is cut in the message, not echoed whole.
func TestRun_AnUnstartableCommandOrAHugeNameIsNamedEscapedAndCut(t *testing.T) {
	url, _ := testRedis(t)
	for _, command := range []string{"/bin/sl\x1b[31meep", "sl\x1b[31meep"} {
		code, _, stderr := runDlock(t, url, "run", "x", "--", command)
		if code != exitNotFound {
			t.Fatalf("%q: exit %d, want %d\n%s", command, code, exitNotFound, stderr)
		}
		noControl(t, fmt.Sprintf("run -- %q", command), stderr)
	}
	huge := strings.Repeat("a", 100_000)
	for _, args := range [][]string{{"run", "x", "--", huge}, {"run", huge, "--", "true"}} {
		if _, _, stderr := runDlock(t, url, args...); len(stderr) > 1000 {
			t.Fatalf("%d bytes said of a name of %d: %.200s…", len(stderr), len(huge), stderr)
		}
	}
}

// Issue 36: a flag that is not defined is named in the error, and the flag
// package printed it raw: dlock run $'--\e]0;PWN\a' retitled the terminal.
// Every command's flag errors are escaped, as the rest of the output is.
func TestCLI_AFlagErrorPrintsNoControlCharacter(t *testing.T) {
	const hostile = "--\x1b]0;PWN\a"
	runs := [][]string{{hostile, "status", "x"}, {"run", "x", hostile, "--", "true"}, {"run", "--wait", "\x1b[2J", "x", "--", "true"}}
	for _, c := range commands() {
		runs = append(runs, []string{c.name, hostile})
	}
	for _, args := range runs {
		code, _, stderr := runDlock(t, "redis://127.0.0.1:1", args...)
		if code != exitUsage {
			t.Fatalf("%q: exit %d, want %d\n%q", args, code, exitUsage, stderr)
		}
		noControl(t, fmt.Sprintf("%q", args), stderr)
	}
}
