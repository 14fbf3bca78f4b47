package scripts

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// A helper is one top-level definition of a library: `local function
// NAME` or `local NAME[, NAME] = ...`, its code without comment lines. A
// script ships only the helpers it calls (EVALSHA makes each a closure per
// call): its segments are those and its parts shipped whole.
type helper struct {
	names []string
	code  string
	uses  map[string]bool // the identifiers its code mentions
	lib   string          // the library's text; "" for a part shipped whole
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

var identifier = regexp.MustCompile(`[A-Za-z_]\w*`)

// parseLibrary splits src into its helpers: each runs from a line that
// begins `local ` to the next. It panics on code outside them.
func parseLibrary(src string) []helper {
	var helpers []helper
	for line := range strings.Lines(uncommentedLines(src)) {
		if m := topDeclaration.FindStringSubmatch(strings.TrimSuffix(line, "\n")); m != nil {
			helpers = append(helpers, helper{names: nameList(m[2]), lib: src})
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

func joined(segs []helper) string {
	var b strings.Builder
	for _, seg := range segs {
		b.WriteString(seg.code)
	}
	return b.String()
}

// assembleSegments are parts, of each library only the helpers the script
// calls, directly or through others, in order: one pass from the end, each
// part adding what it mentions to what is needed before it.
func assembleSegments(parts []string) []helper {
	var segs []helper // from the end
	needed := make(map[string]bool)
	for _, part := range slices.Backward(parts) {
		helpers, isLibrary := libraries[part]
		if !isLibrary {
			helpers = []helper{{code: part, uses: identifiers(part)}}
		}
		for _, h := range slices.Backward(helpers) {
			if isLibrary && !slices.ContainsFunc(h.names, func(name string) bool { return needed[name] }) {
				continue
			}
			maps.Copy(needed, h.uses)
			for _, name := range h.names { // uses before it bind to an earlier one
				delete(needed, name)
			}
			segs = append(segs, h)
		}
	}
	slices.Reverse(segs)
	return segs
}
