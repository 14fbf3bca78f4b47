package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

const completionUsage = `Usage: dlock completion bash|zsh|fish

Prints a completion script for the shell: commands, their flags, run's
command line after "--", the shells of completion and the commands of help.
It is made from the same table as dlock help, so it offers what this dlock
takes.

Examples:
  source <(dlock completion bash)              # in ~/.bashrc
  dlock completion zsh > "${fpath[1]}/_dlock"  # then restart zsh
  dlock completion fish > ~/.config/fish/completions/dlock.fish
`

// completionShells are the shells completion writes for.
const completionShells = "bash zsh fish"

// What a command's arguments complete to (command.complete); else the
// words listed there.
const (
	completeCommands = "<commands>" // dlock's commands
	completeProgram  = "<program>"  // a command line of its own after "--"
)

func defineCompletion(*flag.FlagSet) action {
	return func(_ context.Context, fs *flag.FlagSet, out *output) int {
		if fs.NArg() != 1 {
			return usageError(out, "completion", "want one shell: bash, zsh or fish")
		}
		switch fs.Arg(0) {
		case "bash":
			writeBash(out.stdout, cliModel())
		case "zsh":
			writeZsh(out.stdout, cliModel())
		case "fish":
			writeFish(out.stdout, cliModel())
		default:
			return usageError(out, "completion", "no completion for %q: want bash, zsh or fish", fs.Arg(0))
		}
		return 0
	}
}

// modelCommand is one command as completion and the man page see it.
type modelCommand struct {
	command
	flags []flagInfo
	words []string // its arguments' words, when command.complete lists them
}

// model is every command with its flags, and the global flags.
type model struct {
	global   []flagInfo
	commands []modelCommand
}

func cliModel() model {
	global := newFlagSet("")
	globalFlags(global)
	m := model{global: flagsOf(global)}
	for _, c := range commands() {
		fs := newFlagSet(c.name)
		c.define(fs)
		mc := modelCommand{command: c, flags: flagsOf(fs)}
		switch c.complete {
		case "", completeProgram:
		case completeCommands:
			for _, other := range commands() {
				mc.words = append(mc.words, other.name)
			}
		default:
			mc.words = strings.Fields(c.complete)
		}
		m.commands = append(m.commands, mc)
	}
	return m
}

func (m model) commandNames() []string {
	names := make([]string, 0, len(m.commands))
	for _, c := range m.commands {
		names = append(names, c.name)
	}
	return names
}

// firstClause is a flag's usage up to its first ';': short enough for a
// completion menu.
func firstClause(usage string) string {
	usage, _, _ = strings.Cut(usage, ";")
	return strings.TrimSpace(usage)
}

// flagNames are "--name" for each flag, and "--help", sorted.
func flagNames(flags []flagInfo) []string {
	names := []string{"--help"}
	for _, f := range flags {
		names = append(names, f.names()...)
	}
	sort.Strings(names)
	return names
}

// valueFlags are the flags that take a value, each as --name and -name.
func valueFlags(flags []flagInfo) []string {
	var names []string
	for _, f := range flags {
		if f.arg != "" {
			names = append(names, "--"+f.name, "-"+f.name)
			if f.short != "" {
				names = append(names, "-"+f.short)
			}
		}
	}
	return names
}

func writeBash(w io.Writer, m model) {
	fmt.Fprint(w, `# bash completion for dlock, made by 'dlock completion bash' from its help.
# Load it with: source <(dlock completion bash)
_dlock() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmd= i
    for ((i = 1; i < COMP_CWORD; i++)); do
        if [[ -z $cmd ]]; then
            case ${COMP_WORDS[i]} in
`)
	if v := valueFlags(m.global); len(v) > 0 {
		fmt.Fprintf(w, "                %s) ((i++)) ;;\n", strings.Join(v, "|"))
	}
	fmt.Fprint(w, `                -*) ;;
                *) cmd=${COMP_WORDS[i]} ;;
            esac
        elif [[ ${COMP_WORDS[i]} == -- ]]; then
            case $cmd in
`)
	for _, c := range m.commands {
		if c.complete == completeProgram {
			fmt.Fprintf(w, "                %s)\n", c.name)
			fmt.Fprint(w, `                    # the rest is a command line of its own
                    if declare -F _command_offset >/dev/null; then
                        _command_offset $((i + 1))
                    else
                        COMPREPLY=($(compgen -c -- "$cur"))
                    fi
                    return ;;
`)
		}
	}
	fmt.Fprint(w, `            esac
        fi
    done
    local flags= words= values=
    case $cmd in
`)
	fmt.Fprintf(w, "        '') flags='%s'\n            words='%s'\n            values=' %s ' ;;\n",
		strings.Join(flagNames(m.global), " "), strings.Join(m.commandNames(), " "), strings.Join(valueFlags(m.global), " "))
	for _, c := range m.commands {
		fmt.Fprintf(w, "        %s) flags='%s'\n            words='%s'\n            values=' %s ' ;;\n",
			c.name, strings.Join(flagNames(c.flags), " "), strings.Join(c.words, " "), strings.Join(valueFlags(c.flags), " "))
	}
	fmt.Fprint(w, `    esac
    # A flag's value (--wait 10m): nothing to offer.
    [[ $cur != -* && $values == *" $prev "* ]] && return
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}
complete -F _dlock dlock
`)
}

// zshQuote makes s safe inside single quotes and an _arguments [description].
var zshQuote = strings.NewReplacer(`'`, `'\''`, `[`, `\[`, `]`, `\]`, `\`, `\\`).Replace

// zshFlags are _arguments specs of flags, one a line.
func zshFlags(w io.Writer, flags []flagInfo, indent string) {
	for _, f := range flags {
		for _, name := range f.names() {
			switch {
			case f.arg == "":
				fmt.Fprintf(w, "%s'%s[%s]' \\\n", indent, name, zshQuote(firstClause(f.usage)))
			case strings.HasPrefix(name, "--"):
				fmt.Fprintf(w, "%s'%s=[%s]:%s:' \\\n", indent, name, zshQuote(firstClause(f.usage)), zshQuote(f.arg))
			default:
				fmt.Fprintf(w, "%s'%s[%s]:%s:' \\\n", indent, name, zshQuote(firstClause(f.usage)), zshQuote(f.arg))
			}
		}
	}
	fmt.Fprintf(w, "%s'(- *)--help[show the help]' \\\n", indent)
}

func writeZsh(w io.Writer, m model) {
	fmt.Fprint(w, `#compdef dlock
# zsh completion for dlock, made by 'dlock completion zsh' from its help.
# Save it as _dlock in a directory of $fpath, or: source <(dlock completion zsh)
_dlock() {
    local curcontext=$curcontext state line ret=1
    local -a commands
    commands=(
`)
	for _, c := range m.commands {
		fmt.Fprintf(w, "        '%s:%s'\n", c.name, strings.ReplaceAll(c.summary, "'", `'\''`))
	}
	fmt.Fprint(w, "    )\n    _arguments -C \\\n")
	zshFlags(w, m.global, "        ")
	fmt.Fprint(w, `        '1:command:->command' \
        '*::argument:->argument' && ret=0
    case $state in
        (command) _describe -t commands 'dlock command' commands && ret=0 ;;
        (argument)
            case $words[1] in
`)
	for _, c := range m.commands {
		fmt.Fprintf(w, "        (%s)\n            _arguments \\\n", c.name)
		zshFlags(w, c.flags, "                ")
		switch {
		case c.complete == completeProgram:
			fmt.Fprint(w, "                '1:lock name:' \\\n                '*::command line:_normal' && ret=0\n")
		case len(c.words) > 0:
			fmt.Fprintf(w, "                '1:argument:(%s)' && ret=0\n", strings.Join(c.words, " "))
		default:
			fmt.Fprint(w, "                '*:argument:' && ret=0\n")
		}
		fmt.Fprint(w, "            ;;\n")
	}
	fmt.Fprint(w, `            esac ;;
    esac
    return ret
}
if [[ $funcstack[1] == _dlock ]]; then
    _dlock "$@"
else
    compdef _dlock dlock
fi
`)
}

// fishQuote makes s one single-quoted fish word.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func writeFish(w io.Writer, m model) {
	fmt.Fprint(w, `# fish completion for dlock, made by 'dlock completion fish' from its help.
# Load it with: dlock completion fish | source
complete -c dlock -f
`)
	fishFlags := func(condition string, flags []flagInfo) {
		for _, f := range flags {
			value := ""
			if f.arg != "" {
				value = " -r"
			}
			option := "-l " + f.name
			if len(f.name) == 1 {
				option = "-s " + f.name
			}
			if f.short != "" {
				option += " -s " + f.short
			}
			fmt.Fprintf(w, "complete -c dlock -n %s %s%s -d %s\n", fishQuote(condition), option, value,
				fishQuote(firstClause(f.usage)))
		}
		fmt.Fprintf(w, "complete -c dlock -n %s -l help -d 'show the help'\n", fishQuote(condition))
	}
	fishFlags("__fish_use_subcommand", m.global)
	for _, c := range m.commands {
		fmt.Fprintf(w, "complete -c dlock -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	for _, c := range m.commands {
		seen := "__fish_seen_subcommand_from " + c.name
		fishFlags(seen, c.flags)
		if len(c.words) > 0 {
			fmt.Fprintf(w, "complete -c dlock -n %s -a %s\n", fishQuote(seen), fishQuote(strings.Join(c.words, " ")))
		}
		if c.complete == completeProgram {
			// After "--": a command line of its own, programs then files.
			fmt.Fprintf(w, "complete -c dlock -n %s -F -a '(__fish_complete_command)'\n",
				fishQuote(seen+"; and contains -- -- (commandline -opc)"))
		}
	}
}
