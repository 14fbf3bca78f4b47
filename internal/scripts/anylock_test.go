package scripts

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The scripts for a lock of any type know every key of every type's
// scripts, as AnyLockLayout and ANY are made from their layouts: a list
// (which dlock never writes) under any such key fails Describe and
// ForceUnlock with WRONGTYPE naming it; ForceUnlock removes every key a
// hold lives in, and Describe looks for every key that tells a kind.
func TestAnyLockScripts_KnowEveryKeyOfEveryType(t *testing.T) {
	ctx, rdb := setup(t)
	const lock = "t:{any}"
	locals := AnyLockLayout.anyLockLocals()
	seen := make(map[string]bool)
	listed := func(field, lua string) bool {
		m := regexp.MustCompile(field + ` = \{([^=]*?)\}(, \w+ =|\}$)`).FindStringSubmatch(strings.TrimSpace(locals))
		return m != nil && slices.Contains(regexp.MustCompile(`\w+`).FindAllString(m[1], -1), lua)
	}
	for _, set := range lockTypeScripts {
		for _, s := range set {
			for _, k := range LayoutOf(s) {
				if k.PerCall || k.Form == FormChannel || seen[k.Lua+k.Suffix] {
					continue
				}
				seen[k.Lua+k.Suffix] = true
				i := slices.IndexFunc(AnyLockLayout, func(in Key) bool { return in.Suffix == k.Suffix })
				if i < 0 {
					t.Errorf("AnyLockLayout lacks %s (%q)", k.Lua, k.Suffix)
					continue
				}
				name := AnyLockLayout[i].Lua
				if (k.Held || k.Form == FormLock) && !listed("held", name) {
					t.Errorf("ForceUnlock does not remove %s: %s", name, locals)
				}
				if k.Tells != "" && !strings.Contains(locals, "{"+name+", '"+k.Tells+"'}") {
					t.Errorf("Describe does not look for %s: %s", name, locals)
				}
				key := lock + k.Suffix
				if err := rdb.RPush(ctx, key, "x").Err(); err != nil {
					t.Fatal(err)
				}
				for script, arg := range map[*redis.Script]string{Describe: "", ForceUnlock: "PUBLISH"} {
					err := script.Run(ctx, rdb, AnyLockLayout.Keys(lock), arg).Err()
					if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE ") || !strings.Contains(err.Error(), " "+key+" ") {
						t.Errorf("%s under %s (%s): %v", "a list", key, k.Lua, err)
					}
				}
				if err := rdb.Del(ctx, key).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
