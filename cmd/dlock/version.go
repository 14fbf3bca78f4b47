package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

const versionUsage = `Usage: dlock version

Prints the version of dlock's module, the revision of its source it was
built from, and the Go release and platform it was built with.

Examples:
  dlock version
  dlock --version
`

func defineVersion(*flag.FlagSet) action {
	return func(_ context.Context, fs *flag.FlagSet, out *output) int {
		if fs.NArg() != 0 {
			return usageError(out, "version", "takes no arguments")
		}
		fmt.Fprintln(out.stdout, version())
		return 0
	}
}

// version is the module's version ("(devel)" when built inside its own
// source tree without VCS information), the revision it was built from,
// and the Go release and platform. The revision comes from go build's VCS
// stamping, which needs a git checkout (not a worktree) and GOFLAGS without
// -buildvcs=false; without it the revision is unknown.
func version() string {
	module, revision := "(devel)", "revision unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Version != "" {
			module = info.Main.Version
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if r := settings["vcs.revision"]; r != "" {
			revision = "revision " + r
			if t := settings["vcs.time"]; t != "" {
				revision += " of " + t
			}
			if settings["vcs.modified"] == "true" {
				revision += ", modified"
			}
		}
	}
	return fmt.Sprintf("dlock %s (%s) %s %s/%s", module, revision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
