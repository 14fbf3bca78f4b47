package scripts

import (
	"crypto/sha1"
	"encoding/hex"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Library is the source of dlock's function library, for FUNCTION LOAD,
// which defines the scripts' helpers once where EVALSHA runs a script's
// whole text at every call. LibraryName is its name, "dlock_" and a hash of
// its text, so two versions of dlock each call their own during an upgrade.
var Library, LibraryName = makeLibrary()

// The scripts' function names, and the scripts by SHA or function name.
var (
	functionNames = make(map[*redis.Script]string)
	byName        = make(map[string]*redis.Script)
)

// Function is s's function name in Library: FCALL's first argument where
// EVALSHA's is s's SHA. A script not made here has none ("").
func Function(s *redis.Script) string { return functionNames[s] }

// Of is the script an EVALSHA's SHA or an FCALL's function names, or nil.
func Of(name string) *redis.Script { return byName[name] }

// perCallState is a helper that keeps one call's state: a table (m[1]),
// or values (m[2]), nil at its start.
var perCallState = regexp.MustCompile(`^local (?:([A-Za-z_]\w*) = \{\}|([A-Za-z_][\w, ]*?) = nil(?:, nil)*)\n$`)

// perCallReset is the Lua resetting a perCallState helper; "" for others.
func perCallReset(code string) string {
	switch m := perCallState.FindStringSubmatch(code); {
	case m == nil:
		return ""
	case m[1] != "":
		return m[1] + " = {}\n"
	default:
		return m[2] + " = nil\n"
	}
}

const libraryHash = "%LIBRARY%"

// makeLibrary makes the library of typeScripts, and names their functions.
func makeLibrary() (src, name string) {
	top := topHelpers()
	var b strings.Builder
	b.WriteString("#!lua name=dlock_" + libraryHash + "\n" + runTimeGlobals)
	for _, h := range libraries[prelude] {
		if top[h.names[0]] {
			b.WriteString(h.code)
		}
	}
	for _, s := range slices.Concat(typeScripts...) {
		if functionNames[s] == "" {
			functionNames[s] = "dlock_" + libraryHash + "_" + s.Hash()[:16]
			b.WriteString(function(functionNames[s], assembled[s], top))
		}
	}
	sum := sha1.Sum([]byte(b.String()))
	hash := hex.EncodeToString(sum[:8])
	for s, fn := range functionNames {
		functionNames[s] = strings.Replace(fn, libraryHash, hash, 1)
		byName[functionNames[s]], byName[s.Hash()] = s, s
	}
	return strings.ReplaceAll(b.String(), libraryHash, hash), "dlock_" + hash
}

// globalNames are the globals the scripts read: a read costs a metatable
// lookup (~160 instructions), so the library copies them to same-named
// locals at its first call (load offers only register_function and log).
const globalNames = "redis, type, tonumber, tostring, string, math, table, ipairs, unpack, pcall, error, select"

// runTimeGlobals starts the library: globals, defined before the locals
// that shadow the names, returns what they are when it runs; bind gives
// them to the locals, at a function's first call. A function names only
// redis and bind: Lua 5.1 allows a function 60 upvalues.
const runTimeGlobals = "local register = redis.register_function\n" +
	"local function globals() return " + globalNames + " end\n" +
	"local " + globalNames + "\n" +
	"local function bind() " + globalNames + " = globals() end\n"

// topHelpers tells the prelude's helpers the library defines at its top:
// all but rights_refused, whose list is each script's own, and its callers
// (a helper calls those defined before it).
func topHelpers() map[string]bool {
	top := make(map[string]bool)
	for _, h := range libraries[prelude] {
		shared := !strings.Contains(h.code, rightsList)
		for name := range h.uses {
			if atTop, earlier := top[name]; earlier && !atTop {
				shared = false
			}
		}
		for _, name := range h.names {
			top[name] = shared
		}
	}
	return top
}

// function is the Lua registering a script as the function name. Its block
// defines its helpers once (a closure per call costs ~560 instructions);
// what they read of a call (KEYS, ARGV, the script's top-level names) are
// the block's upvalues, which each call assigns, resetting per-call state.
func function(name string, a assembly, top map[string]bool) string {
	var helpers, body, reset strings.Builder
	defined := make(map[string]bool) // the helpers it defines
	for _, seg := range a.segs {
		code := strings.Replace(seg.code, rightsList, a.rights, 1)
		if seg.lib == "" {
			body.WriteString(uncommentedLines(code))
			continue
		}
		reset.WriteString(perCallReset(code))
		if seg.lib != prelude || !top[seg.names[0]] {
			helpers.WriteString(code)
			for _, n := range seg.names {
				defined[n] = true
			}
		}
	}
	read := identifiers(helpers.String())
	shared := sharedDeclarations(body.String(), read)
	for n := range shared {
		if defined[n] || top[n] {
			panic("scripts: " + name + " declares " + n + ", a helper's name, at its top")
		}
	}
	params := "KEYS, ARGV"
	if read["KEYS"] || read["ARGV"] {
		shared["KEYS"], shared["ARGV"] = true, true
		params = "keys, argv"
		reset.WriteString("KEYS, ARGV = keys, argv\n")
	}
	once := ""
	if len(shared) > 0 {
		once = "local " + strings.Join(slices.Sorted(maps.Keys(shared)), ", ") + "\n"
	}
	flags := "{'allow-oom'}" // a full server must not cost a holder its lease nor keep a lock held
	switch {
	case a.others != nil:
		flags = "{}"
	case a.reads:
		flags = "{'no-writes', 'allow-oom'}"
	}
	return "do\n" + once + helpers.String() +
		"register{function_name = '" + name + "', flags = " + flags + ", callback = function(" + params + ")\n" +
		"if redis == nil then bind() end\n" + reset.String() + declaredShared(body.String(), shared) + "end}\nend\n"
}

// topDeclaration is a line that declares names at a script's top: local,
// maybe function, the names, and what follows them.
var topDeclaration = regexp.MustCompile(`^local (function )?([A-Za-z_][\w, ]*?)\s*(=|\(|$)(.*)$`)

// sharedDeclarations are the names a script declares at its top that read
// mentions, and every name declared on a line with one of them.
func sharedDeclarations(body string, read map[string]bool) map[string]bool {
	shared := make(map[string]bool)
	mentioned := func(n string) bool { return read[n] || shared[n] }
	for grown := true; grown; {
		grown = false
		for line := range strings.SplitSeq(body, "\n") {
			m := topDeclaration.FindStringSubmatch(line)
			if m == nil || !slices.ContainsFunc(nameList(m[2]), mentioned) {
				continue
			}
			for _, n := range nameList(m[2]) {
				grown = grown || !shared[n]
				shared[n] = true
			}
		}
	}
	return shared
}

// declaredShared is code, its declarations of shared names made assignments.
func declaredShared(code string, shared map[string]bool) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimSuffix(code, "\n"), "\n") {
		m := topDeclaration.FindStringSubmatch(line)
		if m != nil && shared[nameList(m[2])[0]] {
			switch {
			case m[1] != "":
				line = m[2] + " = function" + m[3] + m[4]
			case m[3] == "=":
				line = m[2] + " =" + m[4]
			default:
				line = m[2] + " = nil"
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// uncommentedLines is code without comment lines: each server keeps Library.
func uncommentedLines(code string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(code, "\n") {
		if trimmed := strings.TrimSpace(line); trimmed != "" && !strings.HasPrefix(trimmed, "--") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
