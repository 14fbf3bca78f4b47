package scripts

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every script names its ARGV by the fields of its struct, and no script
// indexes ARGV by a number: argLocals is the only Lua that does. (The
// rights flag, ARGV[#ARGV], and a list's items follow the named ones.)
func TestScripts_NameEveryArgByTheirStruct(t *testing.T) {
	for _, set := range typeScripts {
		for _, s := range set {
			if assembled[s].args == nil {
				t.Errorf("a script without an ARGV struct:\n%.300s", assembled[s].src[len(prelude):])
			}
		}
	}
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	numbered := regexp.MustCompile(`ARGV\[\s*\d`)
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if numbered.MatchString(line) {
				t.Errorf("%s:%d indexes ARGV by a number: %s", name, i+1, line)
			}
		}
	}
}

// Append sends each struct's fields in the order argLocals names them;
// a script's but an acquire's without the nil ones that end them.
func TestArgs_AppendInTheOrderOfTheirLocals(t *testing.T) {
	seen := make(map[reflect.Type]bool)
	for _, a := range assembled {
		typ := reflect.TypeOf(a.args)
		if seen[typ] {
			continue
		}
		seen[typ] = true
		names, _ := argNames(typ)
		v := reflect.New(typ).Elem()
		var want []any
		for _, leaf := range reflect.VisibleFields(typ) {
			if leaf.Anonymous {
				continue
			}
			f := v.FieldByIndex(leaf.Index)
			if f.Kind() == reflect.Slice {
				f.Set(reflect.ValueOf([]uint64{7, 8}))
				want = append(want, uint64(7), uint64(8))
				continue
			}
			f.Set(reflect.ValueOf(leaf.Name + "=" + names[len(want)]))
			want = append(want, leaf.Name+"="+names[len(want)])
		}
		got := v.Interface().(interface{ Append([]any) []any }).Append(nil)
		if !slices.Equal(got, want) {
			t.Errorf("%v sends %q; want %q", typ, got, want)
		}
	}
	if got := (ExtendArgs{Owner: "o", TTL: 1}).Append(nil); !slices.Equal(got, []any{"o", 1}) {
		t.Errorf("sent %q; want the fields before the last nil ones", got)
	}
	// An acquire sends its fields up to HOLD_TTL, empty or not; then those
	// before the last not empty; WAITER_TTL and WATCH only with WAITER, but
	// an RWMutex's WAITER_TTL.
	for _, c := range []struct {
		args Args
		want []any
	}{
		{RWAcquireArgs{Acquire: Acquire{Owner: "o", TTL: 1, WaiterTTL: 2}}, []any{nil, "o", 1, nil, 2}}, // its refusal's retry hint
		{MultiAcquireArgs{Publish: "P", Acquire: Acquire{Owner: "o", TTL: 1, WaiterTTL: 2}, Watch: 3}, []any{"P", "o", 1}},
		{MultiAcquireArgs{Publish: "P", Acquire: Acquire{Owner: "o", TTL: 1, Waiter: "w", WaiterTTL: 2}, Watch: 3}, []any{"P", "o", 1, "w", 2, 3}},
		{MutexAcquireArgs{Acquire: Acquire{Owner: "o", TTL: 1, WaiterTTL: 2}, Info: "i"}, []any{"o", 1, nil, "", nil, "i"}},
	} {
		if got := c.args.Append(nil); !slices.Equal(got, c.want) {
			t.Errorf("%#v sent %q; want %q", c.args, got, c.want)
		}
	}
}

// Arg reads an ARGV of a command by its name, whichever way the script is
// called.
func TestArgs_ArgReadsANamedARGVOfACommand(t *testing.T) {
	args := MutexAcquireArgs{Acquire: Acquire{Owner: "o", TTL: 1, Waiter: "w", WaiterTTL: 2}, Previous: "", Info: ""}
	for _, id := range []any{Function(MutexAcquire), MutexAcquire.Hash()} {
		cmd := args.Append([]any{"fcall", id, 2, "k1", "k2"})
		if got := Arg(cmd, "WAITER"); got != "w" {
			t.Errorf("WAITER of %q: %v; want w", cmd, got)
		}
		if got := Arg(cmd, "VALUE"); got != nil {
			t.Errorf("VALUE of %q: %v; want nil (not an ARGV of its script)", cmd, got)
		}
	}
}
