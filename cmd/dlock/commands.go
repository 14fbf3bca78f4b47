package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// command is one subcommand. Its synopsis, help text and flags are the one
// source of `dlock help`, `dlock COMMAND --help`, the shell completions and
// the man page, so that none of them can say other than what it takes.
type command struct {
	name     string
	synopsis string // its arguments, after "dlock NAME"
	summary  string // one line, for `dlock help`
	help     string // --help's text above the flags: "Usage: …", what it does, examples
	complete string // what its arguments complete to: "", completeCommands, completeProgram, or words
	// define adds the command's flags to fs and returns what runs it once
	// they are parsed. Called without running, it lists the flags.
	define func(fs *flag.FlagSet) action
}

// action runs a command whose flags fs has parsed; fs.Args() are its
// arguments.
type action func(ctx context.Context, fs *flag.FlagSet, out *output) int

// commands are dlock's subcommands, in the order help lists them. A
// function, not a variable: help, completion and man list them all.
func commands() []command {
	return []command{
		{name: "run", synopsis: "[flags] NAME -- COMMAND [ARGS...]", summary: "run a command while holding a lock",
			help: runUsage, complete: completeProgram, define: defineRun},
		{name: "status", synopsis: "[--json] NAME", summary: "who holds a lock, for how long, how many wait",
			help: statusUsage, define: defineStatus},
		{name: "ls", synopsis: "[flags] [PATTERN]", summary: "every lock, one line each: holders, TTL, waiters (--json)",
			help: lsUsage, define: defineLs},
		{name: "watch", synopsis: "[flags] [PATTERN|NAME]", summary: "a live view of locks: holders, waiters, TTLs counting down",
			help: watchUsage, define: defineWatch},
		{name: "unlock", synopsis: "--force [--yes] NAME", summary: "remove a lock whatever holds it",
			help: unlockUsage, define: defineUnlock},
		{name: "doctor", synopsis: "[--json] [--prefix PREFIX]", summary: "is this Redis safe for locks? each check, its verdict and why",
			help: doctorUsage, define: defineDoctor},
		{name: "demo", synopsis: "[flags]", summary: "every lock type under contention, with a verdict (embedded Redis)",
			help: demoUsage, define: defineDemo},
		{name: "bench", synopsis: "[flags]", summary: "a contention benchmark (embedded Redis unless --redis)",
			help: benchUsage, define: defineBench},
		{name: "version", synopsis: "", summary: "the version of dlock and the revision it was built from",
			help: versionUsage, define: defineVersion},
		{name: "completion", synopsis: "bash|zsh|fish", summary: "a shell completion script",
			help: completionUsage, complete: completionShells, define: defineCompletion},
		{name: "man", synopsis: "", summary: "the manual page, in roff (dlock man | man -l -)",
			help: manUsage, define: defineMan},
		{name: "help", synopsis: "[COMMAND]", summary: "this text, or a command's help",
			help: helpUsage, complete: completeCommands, define: defineHelp},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// globalFlags are the flags given before the command: --redis there is
// every command's --redis.
func globalFlags(fs *flag.FlagSet) (redisURL *string, version *bool) {
	redisURL = fs.String("redis", "", "Redis `URL` for the command (as its own --redis)")
	version = fs.Bool("version", false, "print the version of dlock")
	return redisURL, version
}

// run executes the command line args (without the program's name) and
// returns the process exit code.
func run(ctx context.Context, args []string, out *output) int {
	global := newFlagSet("")
	globalRedis, showVersion := globalFlags(global)
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(out.stdout, usage())
			return 0
		}
		return usageError(out, "", "%v", err)
	}
	if *showVersion {
		fmt.Fprintln(out.stdout, version())
		return 0
	}
	if global.NArg() == 0 {
		fmt.Fprint(out.stderr, usage())
		return exitUsage
	}
	name, args := global.Arg(0), global.Args()[1:]
	c, ok := lookup(name)
	if !ok {
		return usageError(out, "", "unknown command %q", name)
	}
	fs := newFlagSet(c.name)
	act := c.define(fs)
	if *globalRedis != "" {
		if fs.Lookup("redis") == nil {
			return usageError(out, c.name, "takes no --redis")
		}
		_ = fs.Set("redis", *globalRedis) // a string flag: cannot fail
	}
	if code, done := parseFlags(fs, args, out); done {
		return code
	}
	if first, _, ok := strings.Cut(c.synopsis, " -- "); ok && dashesEndedFlags(fs, args) {
		// dlock run -- echo hi: not a lock named "echo" running hi.
		return usageError(out, c.name, "no %s before \"--\": want %s", first[strings.LastIndexByte(first, ' ')+1:], c.synopsis)
	}
	return act(ctx, fs, out)
}

// dashesEndedFlags says whether fs's flags, parsed from args, were ended
// by "--" rather than by the first argument; a "--" that is a flag's value
// (--info --) does not count.
func dashesEndedFlags(fs *flag.FlagSet, args []string) bool {
	k := len(args) - fs.NArg()
	if k == 0 || args[k-1] != "--" {
		return false
	}
	if k >= 2 && strings.HasPrefix(args[k-2], "-") && !strings.Contains(args[k-2], "=") {
		f := fs.Lookup(strings.TrimLeft(args[k-2], "-"))
		return f == nil || isSwitch(f)
	}
	return true
}

// isSwitch says whether f takes no value: -n, --shared.
func isSwitch(f *flag.Flag) bool {
	boolean, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && boolean.IsBoolFlag()
}

// newFlagSet makes a command's flags. They print nothing themselves:
// parseFlags reports what went wrong, or the help asked for.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs, the flags of the command of its name;
// done says the command should return code: its help was asked for (on
// stdout), or a flag broke a rule (that rule, on stderr).
func parseFlags(fs *flag.FlagSet, args []string, out *output) (code int, done bool) {
	args, err := shortGroups(fs, args)
	if err == nil {
		err = fs.Parse(args)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		c, _ := lookup(fs.Name())
		printHelp(out.stdout, c)
		return 0, true
	case err != nil:
		return usageError(out, fs.Name(), "%v", err), true
	}
	return 0, false
}

// shortGroups splits groups of one-letter flags as getopt does, and so
// flock(1): -ns is -n -s; the last letter may take its value from the rest
// of the word (-E3, -w0.5) or from the next word (-nE 0). It walks args as
// the flag package will, up to "--" or the first argument, so that a
// flag's value (--info -ns) is never split. A word with a letter that is no
// flag is left whole, for the flag package to refuse. A number right after
// a one-letter switch is refused: -n 3 would make 3 the lock's NAME, where
// consul's users mean 3 permits.
func shortGroups(fs *flag.FlagSet, args []string) ([]string, error) {
	words := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || len(arg) < 2 || arg[0] != '-' {
			return append(words, args[i:]...), nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		split := []string{arg}
		if fs.Lookup(name) == nil {
			if arg[1] == '-' {
				return append(words, args[i:]...), nil
			}
			var err error
			if split, err = splitGroup(fs, arg[1:]); err != nil {
				return nil, err
			} else if split == nil {
				return append(words, args[i:]...), nil
			}
			name, _, hasValue = strings.Cut(strings.TrimLeft(split[len(split)-1], "-"), "=")
		}
		words = append(words, split...)
		last := fs.Lookup(name)
		switch {
		case hasValue || i+1 == len(args):
		case !isSwitch(last):
			i++
			words = append(words, args[i]) // its value
		case len(name) == 1 && args[i+1] != "" && strings.Trim(args[i+1], "0123456789") == "":
			return nil, fmt.Errorf("-%s takes no value, not %q: %s", name, args[i+1], usageOf(fs, last))
		}
	}
	return words, nil
}

// splitGroup is the group of one-letter flags letters (ns, nE3) as flags
// of their own (-n -s, -n -E=3), or nil if a letter is no flag. A number
// after a switch (-n3) is refused, as after -n in a word of its own.
func splitGroup(fs *flag.FlagSet, letters string) ([]string, error) {
	var split []string
	for i, letter := range letters {
		f := fs.Lookup(string(letter))
		rest := letters[i+1:]
		switch {
		case f == nil:
			return nil, nil
		case isSwitch(f) && rest != "" && strings.Trim(rest, "0123456789") == "":
			return nil, fmt.Errorf("-%s takes no value, not %q: %s", f.Name, rest, usageOf(fs, f))
		case isSwitch(f):
			split = append(split, "-"+f.Name)
		case rest != "":
			return append(split, "-"+f.Name+"="+rest), nil
		default:
			return append(split, "-"+f.Name), nil
		}
	}
	return split, nil
}

// usageError says which rule the command line broke and where the rules
// are, and returns exitUsage. command is "" for dlock's own flags. The rule
// is escaped: it may quote the command line (the flag package's errors
// name a flag raw), and an escape sequence typed there must not reach the
// terminal.
func usageError(out *output, command, format string, args ...any) int {
	prog := strings.TrimSpace("dlock " + command)
	fmt.Fprintf(out.stderr, "%s: %s\nRun '%s --help' for usage.\n", prog, printable(fmt.Sprintf(format, args...)), prog)
	return exitUsage
}

// printHelp prints a command's help text and its flags.
func printHelp(w io.Writer, c command) {
	fmt.Fprint(w, c.help)
	fs := newFlagSet(c.name)
	c.define(fs)
	if flagCount(fs) > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, fs)
	}
}

func flagCount(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}

// alias defines -short as another name of the flag --long, as flock(1)'s
// -s is its --shared. Help lists them together: "-s, --shared".
func alias(fs *flag.FlagSet, short, long string) {
	fs.Var(fs.Lookup(long).Value, short, aliasMark+long)
}

// exclusiveFlags defines flock(1)'s -x and -e on run's flags: an
// exclusive lock, run's default, so that flock's command lines run as they
// are. As in flock, where the last of -s and -x counts, -x after -s undoes
// it.
func exclusiveFlags(fs *flag.FlagSet) {
	fs.BoolFunc("x", "take an exclusive (write) lock, the default; after -s, undoes it (flock -x)", func(s string) error {
		on, err := strconv.ParseBool(s)
		if err == nil && on {
			err = fs.Set("shared", "false")
		}
		return err
	})
	alias(fs, "e", "x")
}

// usageOf is f's usage; an alias's is its flag's.
func usageOf(fs *flag.FlagSet, f *flag.Flag) string {
	if long, ok := strings.CutPrefix(f.Usage, aliasMark); ok {
		return fs.Lookup(long).Usage
	}
	return f.Usage
}

// aliasMark starts the usage of an alias, which names its flag after it.
const aliasMark = "\x00alias of "

// dashed is a flag's name as typed: -n, --wait.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagInfo is what help, completion and the man page say of one flag.
type flagInfo struct {
	name  string
	short string // its alias of one letter, or ""
	arg   string // what its value is ("duration", "URL", "int"…); "" for a switch
	usage string
	def   string // its default, when it is worth saying; ""
}

// names are the flag's names as typed: "-s", "--shared".
func (f flagInfo) names() []string {
	if f.short != "" {
		return []string{"-" + f.short, dashed(f.name)}
	}
	return []string{dashed(f.name)}
}

// flagsOf lists fs's flags in name order. A value's name is flag's: the
// word in backquotes in its usage, else its type ("duration", "int").
func flagsOf(fs *flag.FlagSet) []flagInfo {
	var flags []flagInfo
	shorts := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if long, ok := strings.CutPrefix(f.Usage, aliasMark); ok {
			shorts[long] = f.Name
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, aliasMark) {
			return
		}
		arg, text := flag.UnquoteUsage(f)
		info := flagInfo{name: f.Name, short: shorts[f.Name], arg: arg, usage: text}
		switch f.DefValue {
		case "", "0", "false", "0s":
		default:
			info.def = f.DefValue
		}
		flags = append(flags, info)
	})
	return flags
}

// printFlags prints fs's flags as help does: "--name type", then what it is.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	for _, f := range flagsOf(fs) {
		fmt.Fprint(w, "  ")
		if f.short != "" {
			fmt.Fprintf(w, "-%s, ", f.short)
		}
		fmt.Fprint(w, dashed(f.name))
		if f.arg != "" {
			fmt.Fprintf(w, " %s", f.arg)
		}
		fmt.Fprintf(w, "\n      %s", f.usage)
		if f.def != "" {
			fmt.Fprintf(w, " (default %s)", f.def)
		}
		fmt.Fprintln(w)
	}
}

// usage is `dlock help`.
func usage() string {
	var b strings.Builder
	b.WriteString("dlock: distributed locks on Redis\n\nUsage:\n")
	width := 0
	for _, c := range commands() {
		width = max(width, len(c.name)+1+len(c.synopsis))
	}
	for _, c := range commands() {
		fmt.Fprintf(&b, "  dlock %-*s   %s\n", width, strings.TrimSpace(c.name+" "+c.synopsis), c.summary)
	}
	b.WriteString("\nRun 'dlock COMMAND --help' for a command's flags and examples.\n\nGlobal flags, before the command:\n")
	global := newFlagSet("")
	globalFlags(global)
	printFlags(&b, global)
	b.WriteString("\n" + redisNotes + "\n" + exitNotes)
	return b.String()
}

// redisNotes and exitNotes end `dlock help`; the man page's ENVIRONMENT
// and EXIT STATUS.
const redisNotes = `Redis: --redis URL, else REDIS_URL, else redis://127.0.0.1:6379. demo and
bench run on an embedded Redis unless --redis is given (REDIS_URL is not
enough), and delete the keys they wrote on a server of yours.
  redis://[user:password@]host:port[/db]   rediss:// for TLS; or host:port
  Several URLs separated by commas are the nodes of a cluster; a single
  node of a cluster is recognised by itself.
`

const exitNotes = `Exit codes:
  0    success (run: the command's own exit code is passed through)
  1    failure: demo verdict failed, a doctor check failed, a foreign value
       under the lock's key, not confirmed
  2    bad flags or arguments
  69   Redis could not be reached or failed
  70   run: dlock's guard crashed; dlock killed the command and released
  77   Redis refused the login (user, password) or a command (ACL)
  75   run: the lock was not acquired within --wait
  76   run: the lock was lost while the command ran; the command was stopped
  126  run: the command could not be started;  127: not found
  128+N  run: the command was killed by signal N; signal N stopped the wait
`

const helpUsage = `Usage: dlock help [COMMAND]

Prints the commands of dlock, or the help of one (as dlock COMMAND --help).

Examples:
  dlock help
  dlock help run
`

func defineHelp(fs *flag.FlagSet) action {
	return func(_ context.Context, fs *flag.FlagSet, out *output) int {
		switch fs.NArg() {
		case 0:
			fmt.Fprint(out.stdout, usage())
			return 0
		case 1:
			c, ok := lookup(fs.Arg(0))
			if !ok {
				return usageError(out, "help", "unknown command %q", fs.Arg(0))
			}
			printHelp(out.stdout, c)
			return 0
		}
		return usageError(out, "help", "want at most one COMMAND")
	}
}
