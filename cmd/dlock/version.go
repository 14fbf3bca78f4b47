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

func version() string {
	v := "(devel)"
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		v = info.Main.Version
	}
	return fmt.Sprintf("dlock %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
