package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func redisClient(addr string) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) }

// row is one library's measurements over the rounds.
type row struct {
	lib    library
	failed string

	uncontended []time.Duration // 1: per lock+unlock
	alone       []cost          // 1: the server's, per lock+unlock
	distinct    []float64       // 2: pairs/s
	distinctOp  []cost          // 2: the server's, per lock+unlock
	contended   []float64       // 3: acquisitions/s
	commands    []float64       // 3: Redis commands per acquisition
	requests    []float64       // 3: requests the server read per acquisition
	serverCPU   []time.Duration // 3: server CPU per acquisition
	clientCPU   []time.Duration // 3: the clients' CPU per acquisition
	hogging     []float64       // 3: max/min acquisitions per client
	handoffP50  []time.Duration // 4
	handoffRTTs []float64       // 4: handoff p50 over an idle PING's p50
	handoffP99  []time.Duration
	waitP50     []time.Duration
	waitP99     []time.Duration
	waitMax     []time.Duration
	fairness    []float64 // 4: max/min acquisitions per client
	queued      []cost    // 4: the server's, per acquisition
	held        *heldResult
}

func (w *row) measure(ctx context.Context, r run) error {
	u, alone, err := r.uncontended(ctx)
	if err != nil {
		return fmt.Errorf("uncontended: %w", err)
	}
	d, distinctOp, err := r.distinctKeys(ctx)
	if err != nil {
		return fmt.Errorf("distinct keys: %w", err)
	}
	c, err := r.contended(ctx)
	if err != nil {
		return fmt.Errorf("contended: %w", err)
	}
	wr, err := r.waiters(ctx)
	if err != nil {
		return fmt.Errorf("waiters: %w", err)
	}
	w.uncontended = append(w.uncontended, u)
	w.alone = append(w.alone, alone)
	w.distinct = append(w.distinct, d)
	w.distinctOp = append(w.distinctOp, distinctOp)
	w.queued = append(w.queued, wr.cost)
	w.contended = append(w.contended, c.perSec)
	w.commands = append(w.commands, c.commands)
	w.requests = append(w.requests, c.requests)
	w.serverCPU = append(w.serverCPU, c.cpu)
	w.clientCPU = append(w.clientCPU, c.client)
	w.hogging = append(w.hogging, c.fairness)
	w.handoffP50 = append(w.handoffP50, wr.handoff.Percentile(50))
	w.handoffRTTs = append(w.handoffRTTs, float64(wr.handoff.Percentile(50))/float64(max(wr.ping.Percentile(50), 1)))
	w.handoffP99 = append(w.handoffP99, wr.handoff.Percentile(99))
	w.waitP50 = append(w.waitP50, wr.wait.Percentile(50))
	w.waitP99 = append(w.waitP99, wr.wait.Percentile(99))
	w.waitMax = append(w.waitMax, wr.wait.Percentile(100))
	w.fairness = append(w.fairness, float64(wr.most)/float64(max(wr.least, 1)))
	return nil
}

// costs are the median server CPU and commands of cs.
func costs(cs []cost) (time.Duration, float64) {
	var cpu []time.Duration
	var commands []float64
	for _, c := range cs {
		cpu, commands = append(cpu, c.cpu), append(commands, c.commands)
	}
	return median(cpu), median(commands)
}

// cpuRatio is the median over rounds of a library's server CPU over the
// ideal's in the same round (1.00× = ideal; above costs more).
func cpuRatio(lib, ideal []cost) string {
	var l, i []time.Duration
	for _, c := range lib {
		l = append(l, c.cpu)
	}
	for _, c := range ideal {
		i = append(i, c.cpu)
	}
	return ratios(l, i, true)
}

func median[T time.Duration | float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// ratios is the median over rounds of a library's value over the ideal's in
// the same round; higher is better when better is "more".
func ratios[T time.Duration | float64](lib, ideal []T, more bool) string {
	n := min(len(lib), len(ideal))
	if n == 0 {
		return "-"
	}
	rs := make([]float64, n)
	for i := range n {
		if more {
			rs[i] = float64(lib[i]) / float64(ideal[i])
		} else {
			rs[i] = float64(ideal[i]) / float64(lib[i])
		}
	}
	return fmt.Sprintf("%.2f×", median(rs))
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func render(rows map[string]*row, typeRows []typeResult, rounds int, hold time.Duration, quick bool, took time.Duration) string {
	var b strings.Builder
	ideal := rows["ideal"]
	fmt.Fprintf(&b, "# dlock against its Go peers\n\n")
	if quick {
		fmt.Fprintf(&b, "**Quick profile: a smoke test, not a result.**\n\n")
	}
	fmt.Fprintf(&b, "- Machine: %s\n- Libraries: %s\n", machine(), versions())
	fmt.Fprintf(&b, "- %d rounds, libraries in rotating order, each against a fresh redis-server of its own on loopback; "+
		"medians over rounds; ratios are to the ideal row of the same round (1.00× = ideal; above is better). The run took %v.\n",
		rounds, took.Round(time.Second))
	fmt.Fprintf(&b, "- Command: `cd bench && go run . -rounds %d -hold %v`\n\n", rounds, hold)
	b.WriteString("How each library waits:\n\n")
	for _, lib := range libraries {
		fmt.Fprintf(&b, "- %s: %s\n", lib.name, lib.note)
	}

	b.WriteString("\n## 1. Uncontended lock + unlock, 1 goroutine\n\n" +
		"Per pair: the time, the server's CPU time (INFO cpu: used_cpu_user + used_cpu_sys) and its ratio to the ideal's (above 1.00× costs more), " +
		"Redis commands (INFO commandstats, inside scripts counted).\n\n" +
		"| library | per pair | vs ideal | server CPU | CPU vs ideal | commands |\n|---|---|---|---|---|---|\n")
	for _, lib := range libraries {
		w := rows[lib.name]
		cpu, commands := costs(w.alone)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.1f |\n", lib.name, round(median(w.uncontended)), ratios(w.uncontended, ideal.uncontended, false),
			round(cpu), cpuRatio(w.alone, ideal.alone), commands)
	}
	b.WriteString("\n## 2. 64 goroutines of one client, distinct keys\n\n" +
		"Per pair as in 1.\n\n| library | pairs/s | vs ideal | server CPU | CPU vs ideal | commands |\n|---|---|---|---|---|---|\n")
	for _, lib := range libraries {
		w := rows[lib.name]
		cpu, commands := costs(w.distinctOp)
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %.1f |\n", lib.name, median(w.distinct), ratios(w.distinct, ideal.distinct, true),
			round(cpu), cpuRatio(w.distinctOp, ideal.distinctOp), commands)
	}
	b.WriteString("\n## 3. 16 clients on one key, back to back\n\n" +
		"Per acquisition: Redis commands (inside scripts counted), requests the server read (round trips), the server's CPU time, the clients' CPU time; " +
		"and the most acquisitions of a client over the fewest (a client that takes the lock again before the others can wake holds them off).\n\n" +
		"| library | acquisitions/s | vs ideal | commands | requests | server CPU | client CPU | max/min per client |\n|---|---|---|---|---|---|---|---|\n")
	for _, lib := range libraries {
		w := rows[lib.name]
		fmt.Fprintf(&b, "| %s | %.0f | %s | %.1f | %.1f | %s | %s | %.2f |\n", lib.name, median(w.contended), ratios(w.contended, ideal.contended, true),
			median(w.commands), median(w.requests), round(median(w.serverCPU)), round(median(w.clientCPU)), median(w.hogging))
	}
	b.WriteString("\n## 4. 8 clients on one key: hold 2 ms, think 3-6 ms\n\n" +
		"Handoff: from a release to a different, waiting client holding the lock; also in round trips, over the p50 of a PING sent alongside " +
		"by a client as idle between requests as the workers (from idle, a round trip pays the wake-ups a handoff pays). Wait: from asking to holding. " +
		"Per acquisition: Redis commands (inside scripts counted, the PINGs left out) and the server's CPU (the PINGs' in).\n\n" +
		"| library | handoff p50 | in round trips | handoff p99 | wait p50 | wait p99 | wait max | max/min per client | commands | server CPU |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, lib := range libraries {
		w := rows[lib.name]
		cpu, commands := costs(w.queued)
		fmt.Fprintf(&b, "| %s | %s | %.2f | %s | %s | %s | %s | %.2f | %.1f | %s |\n", lib.name, round(median(w.handoffP50)), median(w.handoffRTTs),
			round(median(w.handoffP99)), round(median(w.waitP50)), round(median(w.waitP99)), round(median(w.waitMax)), median(w.fairness), commands, round(cpu))
	}
	fmt.Fprintf(&b, "\n## 5. 10,000 leases held by one client for %v\n\n"+
		"Only libraries that keep a lease alive by themselves; the others' locks expire unless the caller renews them.\n\n"+
		"| library | Redis commands/s | client CPU | heap | goroutines |\n|---|---|---|---|---|\n", hold)
	for _, lib := range libraries {
		if h := rows[lib.name].held; h != nil {
			fmt.Fprintf(&b, "| %s | %.0f | %s (%.1f%% of a core) | %.1f MB | %d |\n", lib.name, h.commandsPerSec, round(h.cpu),
				100*h.cpu.Seconds()/hold.Seconds(), h.heapMB, h.goroutines)
		}
	}
	b.WriteString(typesTable(ideal, typeRows))
	for _, lib := range libraries {
		if f := rows[lib.name].failed; f != "" {
			fmt.Fprintf(&b, "\n%s failed: %s\n", lib.name, f)
		}
	}
	return b.String()
}

// typesTable is workload 6's table, beside workload 1's ideal row when
// there is one.
func typesTable(ideal *row, typeRows []typeResult) string {
	if len(typeRows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## 6. dlock's types: uncontended lock + unlock, 1 goroutine\n\n" +
		"Per pair, and per node for a Redlock (three): the server's CPU time, Redis commands (inside scripts counted), " +
		"script calls (EVALSHA or FCALL) and the server's µs per call (INFO commandstats). The ideal row is workload 1's; the last column, a -before run's.\n\n" +
		"| type | per pair | server CPU | commands | scripts | µs per script | server CPU, commands: " + or(beforeLabel, "before") + " |\n|---|---|---|---|---|---|---|\n")
	if ideal != nil && len(ideal.alone) > 0 {
		cpu, commands := costs(ideal.alone)
		fmt.Fprintf(&b, "| ideal | %s | %s | %.1f | - | - | |\n", round(median(ideal.uncontended)), round(cpu), commands)
	}
	for _, t := range typeRows {
		before := ""
		if o := t.Before; o != nil {
			before = fmt.Sprintf("%s, %.1f", round(o.CPU), o.Commands)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %.1f | %.1f | %s |\n", t.Name, round(t.Pair), round(t.CPU), t.Commands, t.Scripts, t.PerCall, before)
	}
	return b.String()
}
