package scripts

import (
	"crypto/sha1"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A Redis Functions library runs its text once, at FUNCTION LOAD, where an
// EVALSHA script runs it at every call: loaded as one library, the scripts
// define their helpers once per server. Each script is one function; the
// prelude's helpers are defined at the top, other helpers that name nothing
// of one call in a block of the script's own. A table a helper keeps is
// one call's, empty at each call, as under EVALSHA.
//
// Every function but an acquire is flagged allow-oom: a full server must
// not cost a holder its lease nor keep a lock held
// (TestLease_AFullServerRefusesAcquiresNotRenewalsOrReleases). A script
// that writes nothing is flagged no-writes, so a replica answers it.
//
// The library and its functions are named after a hash of its text, so two
// versions of dlock each call their own during a rolling upgrade.

// Library is the source of dlock's function library, for FUNCTION LOAD,
// and LibraryName its name: "dlock_" and a hash of its text.
var Library, LibraryName = makeLibrary(typeScripts)

// functionNames are the scripts' function names in Library.
var functionNames = make(map[*redis.Script]string)

// byName finds a script by its SHA or its function name (see Of).
var byName = make(map[string]*redis.Script)

// Function is s's function name in Library: FCALL's first argument where
// EVALSHA's is s's SHA. A script not made here has none ("").
func Function(s *redis.Script) string {
	return functionNames[s]
}

// Of is the script an EVALSHA's SHA or an FCALL's function names; nil for
// one not made here.
func Of(name string) *redis.Script {
	return byName[name]
}

// assembled are the scripts' parts as assembled, and the list of commands
// their rights_refused checks (see rightsFor), for the library.
var assembled = make(map[*redis.Script]assembly)

type assembly struct {
	segs    []segment
	rights  string
	acquire bool // it takes a lock (see allowOOM)
	reads   bool // it writes nothing (readsOnly)
}

// perCallTable is a helper that is one table, filled by a call.
var perCallTable = regexp.MustCompile(`^local ([A-Za-z_]\w*) = \{\}\n$`)

// localNames finds the names a part defines at its top.
var localNames = regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][\w, ]*?)\s*(?:=|\(|$)`)

const libraryHash = "%LIBRARY%"

// makeLibrary makes the library of the scripts of sets, and names their
// functions.
func makeLibrary(sets [][]*redis.Script) (src, name string) {
	top := topHelpers()
	var b strings.Builder
	b.WriteString("#!lua name=dlock_" + libraryHash + "\n")
	for _, h := range libraries[prelude] {
		if top[h.names[0]] {
			b.WriteString(h.code)
		}
	}
	done := make(map[*redis.Script]bool)
	for _, set := range sets {
		for _, s := range set {
			if !done[s] {
				done[s] = true
				functionNames[s] = "dlock_" + libraryHash + "_" + s.Hash()[:16]
				b.WriteString(function(functionNames[s], assembled[s], top))
			}
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

// topHelpers are the prelude's helpers the library defines at its top: all
// but rights_refused, whose list is each script's own, and its callers.
func topHelpers() map[string]bool {
	top := make(map[string]bool)
	for _, h := range libraries[prelude] {
		shared := !strings.Contains(h.code, rightsList)
		for name := range h.uses {
			if isDefinedIn(prelude, name) && !top[name] && !slices.Contains(h.names, name) {
				shared = false
			}
		}
		for _, name := range h.names {
			top[name] = shared
		}
	}
	return top
}

// function is the Lua that registers a script as the function name.
func function(name string, a assembly, top map[string]bool) string {
	perCall := map[string]bool{"KEYS": true, "ARGV": true}
	var once, body, reset strings.Builder
	for _, seg := range a.segs {
		code := strings.Replace(seg.h.code, rightsList, a.rights, 1)
		if seg.lib == "" {
			code = uncommentedLines(code)
			for _, m := range localNames.FindAllStringSubmatch(code, -1) {
				for n := range strings.SplitSeq(strings.ReplaceAll(m[1], " ", ""), ",") {
					perCall[n] = true
				}
			}
			body.WriteString(code)
			continue
		}
		if seg.lib == prelude && top[seg.h.names[0]] {
			if m := perCallTable.FindStringSubmatch(code); m != nil {
				reset.WriteString(m[1] + " = {}\n")
			}
			continue
		}
		if mentionsAny(seg.h.uses, perCall) {
			for _, n := range seg.h.names {
				perCall[n] = true
			}
			body.WriteString(code)
			continue
		}
		if m := perCallTable.FindStringSubmatch(code); m != nil {
			reset.WriteString(m[1] + " = {}\n")
		}
		once.WriteString(code)
	}
	flags := "{'allow-oom'}"
	switch {
	case a.acquire:
		flags = "{}"
	case a.reads:
		flags = "{'no-writes', 'allow-oom'}"
	}
	return "do\n" + once.String() +
		"redis.register_function{function_name = '" + name + "', flags = " + flags + ", callback = function(KEYS, ARGV)\n" +
		reset.String() + body.String() + "end}\nend\n"
}

// uncommentedLines is code without its comment lines: every server keeps
// the library's text.
func uncommentedLines(code string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(code, "\n") {
		if trimmed := strings.TrimSpace(line); trimmed != "" && !strings.HasPrefix(trimmed, "--") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func isDefinedIn(lib, name string) bool {
	return slices.ContainsFunc(libraries[lib], func(h helper) bool { return slices.Contains(h.names, name) })
}

// mentionsAny reports whether uses names one of names.
func mentionsAny(uses, names map[string]bool) bool {
	for name := range names {
		if uses[name] {
			return true
		}
	}
	return false
}
