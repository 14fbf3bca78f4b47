// Command bench compares dlock with the Go locks users would pick instead,
// on the same machine in the same run: each library against a fresh
// redis-server of its own on loopback, libraries interleaved in rotating
// order over several rounds, medians reported with the ratio to the "ideal"
// row of the same round. It writes RESULTS.md. See README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds of workloads 1-4, libraries in rotating order")
	hold := flag.Duration("hold", 20*time.Second, "how long workload 5 holds its 10,000 leases (the issue's soak: 1m)")
	quick := flag.Bool("quick", false, "one short round and a short hold: a smoke test, not a result")
	out := flag.String("out", "RESULTS.md", "where to write the results")
	typesOnly := flag.Bool("types", false, "only workload 6, dlock's types one by one: per-script server µs in seconds")
	readme := flag.String("readme", "", "also rewrite the table between the bench markers in this file (../README.md)")
	only := flag.String("libs", "", "comma-separated libraries to run besides ideal (default: all), for a quicker look")
	asJSON := flag.Bool("json", false, "with -types or -instructions: print the results as JSON, for another run's -before")
	before := flag.String("before", "", "LABEL=BINARY: a bench binary built from an earlier commit, whose -types or -instructions run goes beside this one's")
	instrs := flag.Bool("instructions", false, "only the server's instructions per lock+unlock of each type, under callgrind: a few minutes")
	pairs := flag.Int("pairs", 200, "with -instructions: lock+unlock pairs counted per type")
	flag.Parse()
	if *only != "" {
		libraries = slices.DeleteFunc(libraries, func(l library) bool {
			return l.name != "ideal" && !slices.Contains(strings.Split(*only, ","), l.name)
		})
	}
	scale := 1.0
	if *quick {
		*rounds, *hold, scale = 1, 3*time.Second, 0.3
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, redistest.InstallHint)
		os.Exit(1)
	}
	ctx := context.Background()
	if *instrs {
		if *asJSON {
			rows, err := instructions(ctx, *pairs)
			out, _ := json.Marshal(rows)
			fmt.Println(string(out))
			exitOn(err)
			return
		}
		table, err := instructionsBeside(ctx, *pairs, *before)
		fmt.Print(table)
		exitOn(err)
		if *readme != "" {
			exitOn(writeReadme(*readme, instructionsBegin, instructionsEnd, table))
		}
		return
	}
	servers := redistest.NewShared()
	defer servers.Close()
	if *typesOnly {
		typeRows, err := typesBeside(ctx, servers, scale, *before, *quick)
		if *asJSON {
			out, _ := json.Marshal(typeRows)
			fmt.Println(string(out))
		} else {
			fmt.Print(typesTable(nil, typeRows))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			servers.Close()
			os.Exit(1)
		}
		return
	}
	start := time.Now()

	rows := make(map[string]*row)
	addrs := make(map[string]string)
	for _, lib := range libraries {
		srv := redistest.Start(servers)
		addrs[lib.name] = srv.Addr()
		rows[lib.name] = &row{lib: lib}
	}
	for round := range *rounds {
		order := slices.Clone(libraries)
		k := round % len(order)
		order = append(order[k:], order[:k]...)
		for _, lib := range order {
			fmt.Fprintf(os.Stderr, "round %d/%d: %s\n", round+1, *rounds, lib.name)
			r := run{lib: lib, addr: addrs[lib.name], admin: redisClient(addrs[lib.name]), round: round, scale: scale}
			mctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a hung peer fails its row
			err := rows[lib.name].measure(mctx, r)
			cancel()
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", lib.name, err)
				rows[lib.name].failed = err.Error()
			}
			_ = r.admin.Close()
		}
	}
	for _, lib := range libraries {
		if !lib.renews {
			continue
		}
		fmt.Fprintf(os.Stderr, "10,000 leases held for %v: %s\n", *hold, lib.name)
		r := run{lib: lib, addr: addrs[lib.name], admin: redisClient(addrs[lib.name]), round: *rounds, scale: scale}
		// A peer that hangs (rueidislock once did, taking a lease) must not
		// hang the run: it fails its row instead.
		hctx, cancel := context.WithTimeout(ctx, *hold+time.Minute)
		res, err := r.held(hctx, *hold)
		cancel()
		_ = r.admin.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", lib.name, err)
			continue
		}
		rows[lib.name].held = &res
	}

	var typeRows []typeResult
	if rows["dlock"] != nil {
		fmt.Fprintln(os.Stderr, "dlock's types")
		var err error
		if typeRows, err = typesBeside(ctx, servers, scale, *before, *quick); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}

	report := render(rows, typeRows, *rounds, *hold, *quick, time.Since(start))
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(report)
	if *readme != "" {
		if err := writeReadme(*readme, readmeBegin, readmeEnd, readmeTable(rows, typeRows, *quick)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// exitOn exits with err, if any.
func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// machine describes where the run ran.
func machine() string {
	cpu := "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	redisVersion, _ := exec.Command("redis-server", "--version").Output()
	return fmt.Sprintf("%s/%s, %d CPUs (%s); %s; %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpu,
		runtime.Version(), strings.TrimSpace(string(redisVersion)))
}

// versions lists the libraries' module versions.
func versions() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var parts []string
	for _, dep := range info.Deps {
		switch dep.Path {
		case "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/rueidis", "github.com/redis/go-redis/v9":
			parts = append(parts, dep.Path+" "+dep.Version)
		case "github.com/dlockio/dlock":
			parts = append(parts, dep.Path+" (this checkout)")
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
