package scripts

import (
	"regexp"
	"slices"
	"strings"
)

// Redis runs a script's whole text on every EVALSHA, each helper a closure
// per call (the full prelude cost about 7 µs of server CPU), so a script
// ships only the helpers it calls, found here.

// A helper is one top-level definition of a library: `local function
// NAME` or `local NAME[, NAME] = ...`, its code without comment lines.
type helper struct {
	names []string
	code  string
	uses  map[string]bool // the identifiers its code mentions
}

// libraries are the parts of scripts made of helpers alone, by their text,
// parsed once; every other part is shipped whole.
var libraries = func() map[string][]helper {
	parsed := map[string][]helper{prelude: parseLibrary(prelude)}
	for _, name := range []string{"wake_next", "hand_next", "fair_lib", "sem_lib", "multi_lib", "rw_lib", "election_lib"} {
		parsed[lua(name)] = parseLibrary(lua(name))
	}
	return parsed
}()

var (
	definition = regexp.MustCompile(`^local (?:function ([A-Za-z_]\w*)|([A-Za-z_][\w, ]*?)\s*=)`)
	identifier = regexp.MustCompile(`[A-Za-z_]\w*`)
)

// parseLibrary splits src into its helpers: each runs from a line that
// begins `local ` to the next. It panics on code outside them.
func parseLibrary(src string) []helper {
	var helpers []helper
	for line := range strings.Lines(uncommentedLines(src)) {
		if m := definition.FindStringSubmatch(line); m != nil {
			names := []string{m[1]}
			if m[1] == "" {
				names = nameList(m[2])
			}
			helpers = append(helpers, helper{names: names})
		} else if len(helpers) == 0 {
			panic("scripts: a library starts with code outside a definition: " + line)
		}
		helpers[len(helpers)-1].code += line
	}
	for i := range helpers {
		helpers[i].uses = identifiers(helpers[i].code)
	}
	return helpers
}

// nameList is the names of a Lua list of them ("a, b").
func nameList(list string) []string {
	return strings.Split(strings.ReplaceAll(list, " ", ""), ",")
}

// identifiers are the names code mentions outside its comments (strings'
// words are counted too: at worst a helper too many).
func identifiers(src string) map[string]bool {
	names := make(map[string]bool)
	for _, name := range identifier.FindAllString(withoutComments(src), -1) {
		names[name] = true
	}
	return names
}

// withoutComments is src without its comments.
func withoutComments(src string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(src, "\n") {
		b.WriteString(uncommented(line) + "\n")
	}
	return b.String()
}

// uncommented is line up to its comment, if any: a "--" outside quotes.
func uncommented(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case quote != 0 && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && strings.HasPrefix(line[i:], "--"):
			return line[:i]
		}
	}
	return line
}

// A segment is one piece of an assembled script: a helper of a library
// (lib is the library's text) or a part shipped whole (lib is "").
type segment struct {
	lib string
	h   helper // for a part: its code alone
}

// joined is the text of segs.
func joined(segs []segment) string {
	var b strings.Builder
	for _, seg := range segs {
		b.WriteString(seg.h.code)
	}
	return b.String()
}

// assembleSegments are parts, keeping of each library only the helpers the
// script calls, directly or through other helpers, in their order: one
// pass from the end, each part adding what it mentions to what is needed
// before it.
func assembleSegments(parts []string) []segment {
	kept := make([][]segment, len(parts))
	needed := make(map[string]bool)
	for i := len(parts) - 1; i >= 0; i-- {
		helpers, isLibrary := libraries[parts[i]]
		if !isLibrary {
			uses := identifiers(parts[i])
			kept[i] = []segment{{h: helper{code: parts[i], uses: uses}}}
			for name := range uses {
				needed[name] = true
			}
			continue
		}
		for j := len(helpers) - 1; j >= 0; j-- {
			h := helpers[j]
			if !slices.ContainsFunc(h.names, func(name string) bool { return needed[name] }) {
				continue
			}
			for name := range h.uses {
				needed[name] = true
			}
			for _, name := range h.names { // uses before it bind to an earlier one
				delete(needed, name)
			}
			kept[i] = append(kept[i], segment{lib: parts[i], h: h})
		}
	}
	var segs []segment
	for i, part := range kept {
		if _, isLibrary := libraries[parts[i]]; isLibrary {
			slices.Reverse(part) // kept from the end
		}
		segs = append(segs, part...)
	}
	return segs
}
