package scripts

import (
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Every script is a function of the library, which loads (setup loads it
// for every test here, and runs the scripts as FCALL of their functions).
func TestLibrary_HasAFunctionPerScript(t *testing.T) {
	for s := range assembled {
		if Function(s) == "" || Of(Function(s)) != s || Of(s.Hash()) != s {
			t.Errorf("script %s has no function in the library", s.Hash())
		}
		if !strings.HasPrefix(Function(s), LibraryName+"_") {
			t.Errorf("function %s is not named after its library %s: two versions' would clash", Function(s), LibraryName)
		}
	}
	if !strings.HasPrefix(Library, "#!lua name="+LibraryName+"\n") {
		t.Errorf("the library starts %.60q", Library)
	}
}

// A function's helpers outlive its calls, and the tables they keep would
// too: each call starts them empty, as an EVALSHA script does. Here the
// server's clock, read once per call: with the fencing counter gone, a
// token is the clock in µs, and the second acquire's is later.
func TestLibrary_EachCallReadsTheClockAnew(t *testing.T) {
	ctx, rdb := setup(t)
	first := acquire(t, ctx, rdb, tok("a"))
	if first[0] != 1 || release(t, ctx, rdb, tok("a")) != 1 {
		t.Fatalf("acquire %v", first)
	}
	if err := rdb.Del(ctx, fenceKey).Err(); err != nil {
		t.Fatal(err)
	}
	if second := acquire(t, ctx, rdb, tok("b")); second[0] != 1 || second[1] <= first[1] {
		t.Fatalf("the second acquire %v, the first's token %d: the clock was not read anew", second, first[1])
	}
}

// The scripts that only read are flagged no-writes, and no other is: Redis
// refuses a write in such a function.
func TestLibrary_ReadsAreFlaggedNoWrites(t *testing.T) {
	reads := map[*redis.Script]bool{MutexTTL: true, SemTTL: true, MultiTTL: true, RWTTL: true, RWInspect: true, Describe: true, ElectionLeader: true}
	for _, set := range typeScripts {
		for _, s := range set {
			if got := assembled[s].reads; got != reads[s] {
				t.Errorf("%s: flagged reading only %v, want %v", Function(s), got, reads[s])
			}
		}
	}
}

// A helper is defined once, at load, where every call would make it anew:
// also those that read what one call sets (KEYS, ARGV, the names a script
// declares at its top), as an RWMutex's do. No function's body defines a
// helper of a library.
func TestLibrary_DefinesEveryHelperOnce(t *testing.T) {
	helpers := make(map[string]bool)
	for _, lib := range libraries {
		for _, h := range lib {
			for _, n := range h.names {
				helpers[n] = true
			}
		}
	}
	for _, fn := range strings.Split(Library, "callback = function(")[1:] {
		body, _, _ := strings.Cut(fn, "\nend}\n")
		for _, line := range strings.Split(body, "\n") {
			if m := topDeclaration.FindStringSubmatch(line); m != nil && m[1] != "" && helpers[m[2]] {
				t.Errorf("a function defines the helper %s at every call", m[2])
			}
		}
	}
}

// Each global a function reads costs a metatable lookup (globalNames):
// the library reads every global its scripts use once, into a local.
func TestLibrary_ReadsEachGlobalOnce(t *testing.T) {
	bound := make(map[string]bool)
	for _, n := range strings.Split(globalNames, ", ") {
		bound[n] = true
	}
	literal := regexp.MustCompile(`'[^']*'|"[^"]*"`)
	read := make(map[string]bool) // names the code reads, but fields (a.b's b)
	for line := range strings.SplitSeq(Library, "\n") {
		for _, m := range regexp.MustCompile(`(^|[^.\w])([A-Za-z_]\w*)`).FindAllStringSubmatch(literal.ReplaceAllString(uncommented(line), "''"), -1) {
			read[m[2]] = true
		}
	}
	// Lua 5.1's and Redis's globals a script might read.
	for _, n := range strings.Fields("assert bit cjson cmsgpack error getmetatable ipairs math next pairs pcall rawequal rawget rawset " +
		"redis select setmetatable string struct table tonumber tostring type unpack xpcall") {
		if read[n] && !bound[n] {
			t.Errorf("the scripts read the global %s, which globalNames does not bind", n)
		}
	}
}

// Lua 5.1 allows a function 60 upvalues, and one over refuses the whole
// library at FUNCTION LOAD: each function has room for five more (each
// helper, KEYS name or bound global it reads is one; sem_acquire.lua's
// has nine to spare).
func TestLibrary_FunctionsHaveRoomForMoreUpvalues(t *testing.T) {
	ctx, rdb := setup(t)
	const spare = "s1, s2, s3, s4, s5"
	header, rest, _ := strings.Cut(Library, "\n")
	src := header + "\nlocal " + spare + "\n" + rest
	src = regexp.MustCompile(`callback = function\((\w+, \w+)\)\n`).ReplaceAllString(src, "${0}local _ = {"+spare+"}\n")
	if !strings.Contains(src, "local _ = {"+spare+"}") {
		t.Fatal("no function found to load with more upvalues")
	}
	if err := rdb.FunctionLoadReplace(ctx, src).Err(); err != nil {
		t.Fatalf("the library with five more upvalues in each function: %v", err)
	}
}

// A number given to redis.call is formatted with %.17g, about 2,900
// instructions a time (ARCHITECTURE.md): the scripts give a literal as text.
func TestScripts_GiveRedisCallNoNumberLiteral(t *testing.T) {
	literal := regexp.MustCompile(`(redis\.p?call|(?:call|text)_or_wrongtype|call_on)\([^)]*,\s*-?\d+\s*[,)]`)
	files, err := luaFiles.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for i, line := range strings.Split(lua(strings.TrimSuffix(f.Name(), ".lua")), "\n") {
			if literal.MatchString(line) {
				t.Errorf("%s:%d: a number literal to redis.call: %s", f.Name(), i+1, strings.TrimSpace(line))
			}
		}
	}
}
