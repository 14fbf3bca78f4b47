package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

const manUsage = `Usage: dlock man

Prints dlock's manual page in roff: every command's help and flags, made
from the same table as dlock help, so that it says what this dlock takes.

Examples:
  dlock man | man -l -
  dlock man > /usr/local/share/man/man1/dlock.1
`

func defineMan(*flag.FlagSet) action {
	return func(_ context.Context, fs *flag.FlagSet, out *output) int {
		if fs.NArg() != 0 {
			return usageError(out, "man", "takes no arguments")
		}
		writeMan(out.stdout, cliModel())
		return 0
	}
}

// roffEscape keeps text literal in roff: a backslash is the escape
// character, "-" would be a hyphen, not the minus of a flag, and troff
// reads bytes, not UTF-8: "…" is "...", which every device has; other
// characters are named (\[u00D7]).
func roffEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\e`)
		case r == '-':
			b.WriteString(`\-`)
		case r == '…':
			b.WriteString("...")
		case r > 127:
			fmt.Fprintf(&b, `\[u%04X]`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// roffLine is one escaped line of text; a leading "." or "'" would make it
// a request.
func roffLine(line string) string {
	line = roffEscape(line)
	if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
		line = `\&` + line
	}
	return line
}

// writeRoffText writes a help text: blank lines part paragraphs, indented
// lines (examples, tables) are shown as they are.
func writeRoffText(w io.Writer, text string) {
	indented := false
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		isIndented := strings.HasPrefix(line, "  ")
		if indented && !isIndented {
			fmt.Fprint(w, ".fi\n.RE\n")
			indented = false
		}
		switch {
		case line == "":
			fmt.Fprintln(w, ".PP")
		case isIndented:
			if !indented {
				fmt.Fprint(w, ".RS 2\n.nf\n")
				indented = true
			}
			fmt.Fprintln(w, roffLine(line[2:]))
		default:
			fmt.Fprintln(w, roffLine(line))
		}
	}
	if indented {
		fmt.Fprint(w, ".fi\n.RE\n")
	}
}

// writeRoffFlags lists flags as tagged paragraphs.
func writeRoffFlags(w io.Writer, flags []flagInfo) {
	for _, f := range flags {
		fmt.Fprintf(w, ".TP\n.B %s", roffEscape(strings.Join(f.names(), ", ")))
		if f.arg != "" {
			fmt.Fprintf(w, ` \fI%s\fR`, roffEscape(f.arg))
		}
		fmt.Fprintf(w, "\n%s", roffLine(f.usage))
		if f.def != "" {
			fmt.Fprintf(w, " (default %s)", roffEscape(f.def))
		}
		fmt.Fprintln(w)
	}
}

func writeMan(w io.Writer, m model) {
	// No hyphenation: a flag or a name broken across lines cannot be typed.
	fmt.Fprint(w, ".TH DLOCK 1 \"\" \"dlock\" \"User Commands\"\n.nh\n.SH NAME\ndlock \\- distributed locks on Redis\n.SH SYNOPSIS\n")
	for _, c := range m.commands {
		fmt.Fprint(w, ".B dlock\n")
		if slices.ContainsFunc(c.flags, func(f flagInfo) bool { return f.name == "redis" }) {
			fmt.Fprint(w, "[\\fB\\-\\-redis\\fR \\fIURL\\fR]\n")
		}
		fmt.Fprintf(w, ".B %s\n", c.name)
		if c.synopsis != "" {
			fmt.Fprintln(w, roffLine(c.synopsis))
		}
		fmt.Fprint(w, ".br\n")
	}
	fmt.Fprint(w, ".SH DESCRIPTION\n")
	for _, c := range m.commands {
		fmt.Fprintf(w, ".TP\n.B %s\n%s\n", c.name, roffLine(c.summary))
	}
	fmt.Fprint(w, ".SH GLOBAL FLAGS\nGiven before the command.\n")
	writeRoffFlags(w, m.global)
	fmt.Fprint(w, ".SH COMMANDS\n")
	for _, c := range m.commands {
		fmt.Fprintf(w, ".SS \"dlock %s\"\n", strings.TrimSpace(c.name+" "+roffEscape(c.synopsis)))
		// The help's first line, "Usage: …", is the heading.
		_, body, _ := strings.Cut(c.help, "\n")
		writeRoffText(w, strings.TrimLeft(body, "\n"))
		if len(c.flags) > 0 {
			fmt.Fprint(w, ".PP\nFlags:\n")
			writeRoffFlags(w, c.flags)
		}
	}
	fmt.Fprint(w, ".SH ENVIRONMENT\n")
	writeRoffText(w, redisNotes)
	fmt.Fprint(w, ".SH EXIT STATUS\n")
	writeRoffText(w, exitNotes)
	fmt.Fprint(w, ".SH SEE ALSO\n.BR flock (1)\n")
}
