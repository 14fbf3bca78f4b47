package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// cliSurface is every command and flag, as the help users read lists them:
// what the completions and the man page must all know.
type cliSurface struct {
	global   []string            // flags before the command
	commands []string            // in help's order
	flags    map[string][]string // each command's
}

func readSurface(t *testing.T) cliSurface {
	t.Helper()
	code, help, _ := runDlock(t, "", "help")
	if code != 0 {
		t.Fatalf("dlock help: exit %d", code)
	}
	flagLine := regexp.MustCompile(`(?m)^  (?:-[a-zA-Z], )?--([a-z-]+)`) // -s, --shared: its long name
	s := cliSurface{flags: map[string][]string{}}
	commands, global, _ := strings.Cut(help, "Global flags")
	for _, m := range regexp.MustCompile(`(?m)^  dlock ([a-z]+)`).FindAllStringSubmatch(commands, -1) {
		s.commands = append(s.commands, m[1])
	}
	global, _, _ = strings.Cut(global, "\n\n")
	for _, m := range flagLine.FindAllStringSubmatch(global, -1) {
		s.global = append(s.global, m[1])
	}
	for _, c := range s.commands {
		code, help, _ := runDlock(t, "", c, "--help")
		if code != 0 {
			t.Fatalf("dlock %s --help: exit %d", c, code)
		}
		_, flags, _ := strings.Cut(help, "\nFlags:\n")
		s.flags[c] = []string{"help"} // the flag package's own
		for _, m := range flagLine.FindAllStringSubmatch(flags, -1) {
			s.flags[c] = append(s.flags[c], m[1])
		}
	}
	for _, want := range []string{"run", "status", "unlock", "demo", "bench", "version", "completion", "man", "help"} {
		if !slices.Contains(s.commands, want) {
			t.Fatalf("dlock help does not list %s:\n%s", want, help)
		}
	}
	if len(s.global) == 0 || len(s.flags["run"]) < 5 {
		t.Fatalf("flags not found in the help: %+v", s)
	}
	return s
}

func completion(t *testing.T, shell string) string {
	t.Helper()
	code, script, stderr := runDlock(t, "", "completion", shell)
	if code != 0 || script == "" {
		t.Fatalf("dlock completion %s: exit %d\n%s", shell, code, stderr)
	}
	return script
}

// The bash completion, loaded into bash, offers each command, and each
// command's flags after it.
func TestCompletion_BashOffersEveryCommandAndFlag(t *testing.T) {
	s := readSurface(t)
	file := filepath.Join(t.TempDir(), "dlock.bash")
	if err := os.WriteFile(file, []byte(completion(t, "bash")), 0o600); err != nil {
		t.Fatal(err)
	}
	// complete prints what _dlock offers for the words before the cursor
	// and the word at it.
	probe := `source "$1" || exit 1
complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _dlock; echo "${COMPREPLY[*]}"; }
`
	var want []string
	probe += "complete_words dlock ''\n"
	want = append(want, strings.Join(s.commands, " "))
	probe += "complete_words dlock --\n"
	want = append(want, "--"+strings.Join(s.global, " --")+" --help")
	probe += "complete_words dlock --redis redis://x st\n"
	want = append(want, "status")
	for _, c := range s.commands {
		probe += "complete_words dlock " + c + " --\n"
		flags := slices.Clone(s.flags[c])
		slices.Sort(flags)
		want = append(want, "--"+strings.Join(flags, " --"))
	}
	probe += "complete_words dlock run --wait ''\n" // a value: nothing to offer
	want = append(want, "")
	probe += "complete_words dlock completion ''\n"
	want = append(want, "bash zsh fish")
	cmd := exec.Command("bash", "--norc", "-c", probe, "bash", file)
	out, err := cmd.CombinedOutput()
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if err != nil || len(got) != len(want) {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	for i := range want {
		gotWords, wantWords := strings.Fields(got[i]), strings.Fields(want[i])
		slices.Sort(gotWords)
		slices.Sort(wantWords)
		if !slices.Equal(gotWords, wantWords) {
			t.Errorf("completion %d: got %q, want %q", i, got[i], want[i])
		}
	}
}

// fish, asked what it would complete (complete -C), offers each command,
// and each command's flags after it.
func TestCompletion_FishOffersEveryCommandAndFlag(t *testing.T) {
	if _, err := exec.LookPath("fish"); err != nil {
		t.Skip("fish is not installed")
	}
	s := readSurface(t)
	file := filepath.Join(t.TempDir(), "dlock.fish")
	if err := os.WriteFile(file, []byte(completion(t, "fish")), 0o600); err != nil {
		t.Fatal(err)
	}
	offered := func(line string) []string {
		t.Helper()
		out, err := exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, file, line).CombinedOutput()
		if err != nil {
			t.Fatalf("fish, %q: %v\n%s", line, err, out)
		}
		var words []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			word, _, _ := strings.Cut(l, "\t")
			words = append(words, word)
		}
		return words
	}
	got := offered("dlock ")
	for _, c := range s.commands {
		if !slices.Contains(got, c) {
			t.Errorf("fish offers %v after dlock, not %s", got, c)
		}
	}
	got = offered("dlock --")
	for _, f := range s.global {
		if !slices.Contains(got, "--"+f) {
			t.Errorf("fish offers %v for dlock --, not --%s", got, f)
		}
	}
	for _, c := range s.commands {
		got := offered("dlock " + c + " --")
		for _, f := range s.flags[c] {
			if !slices.Contains(got, "--"+f) {
				t.Errorf("fish offers %v for dlock %s --, not --%s", got, c, f)
			}
		}
	}
	if got := offered("dlock completion "); !slices.Equal(got, []string{"bash", "fish", "zsh"}) {
		t.Errorf("fish offers %v after dlock completion", got)
	}
}

// zsh's completion is read by zsh without an error and names every
// command, and every flag within its command's part of the script.
func TestCompletion_ZshNamesEveryCommandAndFlag(t *testing.T) {
	s := readSurface(t)
	script := completion(t, "zsh")
	if !strings.HasPrefix(script, "#compdef dlock\n") {
		t.Fatalf("zsh completion does not start with #compdef:\n%s", script)
	}
	if _, err := exec.LookPath("zsh"); err == nil {
		file := filepath.Join(t.TempDir(), "_dlock")
		if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("zsh", "-n", file).CombinedOutput(); err != nil {
			t.Fatalf("zsh -n: %v\n%s", err, out)
		}
	}
	for _, f := range s.global {
		if !strings.Contains(script, "'--"+f) {
			t.Errorf("zsh completion does not name the global --%s", f)
		}
	}
	for _, c := range s.commands {
		if !strings.Contains(script, "'"+c+":") {
			t.Errorf("zsh completion does not list the command %s", c)
		}
		// The command's part: from its case label to the next ";;".
		_, part, ok := strings.Cut(script, "\n        ("+c+")\n")
		part, _, _ = strings.Cut(part, ";;")
		for _, f := range s.flags[c] {
			if !ok || !strings.Contains(part, "--"+f+"[") && !strings.Contains(part, "--"+f+"=[") {
				t.Errorf("zsh completion of %s does not name --%s", c, f)
			}
		}
	}
}

// The man page is roff that groff reads without a warning, with a section
// for every command naming every flag of it.
func TestMan_DescribesEveryCommandAndFlag(t *testing.T) {
	s := readSurface(t)
	code, page, stderr := runDlock(t, "", "man")
	if code != 0 || !strings.HasPrefix(page, ".TH DLOCK 1") {
		t.Fatalf("dlock man: exit %d\n%s%s", code, page, stderr)
	}
	for _, f := range s.global {
		if !strings.Contains(page, `\-\-`+f) {
			t.Errorf("the man page does not name the global --%s", f)
		}
	}
	for _, c := range s.commands {
		_, part, ok := strings.Cut(page, "\n.SS \"dlock "+c)
		part, _, _ = strings.Cut(part, "\n.SS ")
		for _, f := range s.flags[c] {
			if f == "help" {
				continue
			}
			named := regexp.MustCompile(`(?m)^\.B (\\-[a-zA-Z], )?\\-\\-` + strings.ReplaceAll(f, "-", `\\-`) + `\b`)
			if !ok || !named.MatchString(part) {
				t.Errorf("the man page's section on %s does not name --%s", c, f)
			}
		}
		if !ok {
			t.Errorf("the man page has no section on %s", c)
		}
	}
	if _, err := exec.LookPath("groff"); err != nil {
		return
	}
	render := exec.Command("groff", "-man", "-Tascii", "-ww")
	render.Stdin = strings.NewReader(page)
	var warnings strings.Builder
	render.Stderr = &warnings
	text, err := render.Output()
	if err != nil || warnings.Len() > 0 {
		t.Fatalf("groff: %v\n%s", err, &warnings)
	}
	plain := regexp.MustCompile(".\b").ReplaceAllString(string(text), "") // overstrikes for bold
	if !strings.Contains(plain, "dlock run --wait 0 nightly-report -- /usr/local/bin/report") {
		t.Errorf("the rendered page does not show run's first example as typed:\n%s", plain)
	}
}

func TestCompletion_RefusesAnUnknownShell(t *testing.T) {
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		if code, stdout, stderr := runDlock(t, "", args...); code != exitUsage || stdout != "" || !strings.Contains(stderr, "bash, zsh or fish") {
			t.Errorf("dlock %v: exit %d, %q, %q; want %d naming the shells", args, code, stdout, stderr, exitUsage)
		}
	}
}
