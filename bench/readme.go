package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// The README's tables lie between these markers; -readme rewrites one from
// a run, so that its figures are one run's, on one date: the timed table,
// or with -instructions the table of instructions.
const (
	readmeBegin       = "<!-- bench table: made by bench/ (go run . -readme ../README.md); edits here are overwritten -->"
	readmeEnd         = "<!-- end of bench table -->"
	instructionsBegin = "<!-- instructions table: made by bench/ (go run . -instructions -readme ../README.md); edits here are overwritten -->"
	instructionsEnd   = "<!-- end of instructions table -->"
)

// readmeTable is the README's summary of a run: dlock beside the ideal
// client, each figure from this run alone.
func readmeTable(rows map[string]*row, typeRows []typeResult, quick bool) string {
	var b strings.Builder
	note := ""
	if quick {
		note = " (-quick: a smoke test, not a result)"
	}
	fmt.Fprintf(&b, "Measured %s on %s%s; every peer in [bench/RESULTS.md](bench/RESULTS.md).\n\n",
		time.Now().UTC().Format("2006-01-02"), machine(), note)
	b.WriteString("| what | dlock | ideal client | dlock / ideal |\n|---|---|---|---|\n")
	d, i := rows["dlock"], rows["ideal"]
	if d != nil && i != nil && d.failed == "" && i.failed == "" {
		dCPU, dCmd := costs(d.alone)
		iCPU, iCmd := costs(i.alone)
		fmt.Fprintf(&b, "| Mutex lock+unlock, 1 goroutine | %s, server CPU %s, %.1f commands | %s, %s, %.1f | %s time, %s server CPU |\n",
			round(median(d.uncontended)), round(dCPU), dCmd, round(median(i.uncontended)), round(iCPU), iCmd,
			ratios(d.uncontended, i.uncontended, true), cpuRatio(d.alone, i.alone))
		dCPU, _ = costs(d.distinctOp)
		iCPU, _ = costs(i.distinctOp)
		fmt.Fprintf(&b, "| Mutex, 64 goroutines, distinct keys | %.0f pairs/s, server CPU %s a pair | %.0f, %s | %s pairs/s, %s server CPU |\n",
			median(d.distinct), round(dCPU), median(i.distinct), round(iCPU),
			ratios(d.distinct, i.distinct, true), cpuRatio(d.distinctOp, i.distinctOp))
		fmt.Fprintf(&b, "| Mutex, 16 clients on one key | %.0f acquisitions/s, %.1f commands each, max/min per client %.2f | %.0f, %.1f, %.2f | %s |\n",
			median(d.contended), median(d.commands), median(d.hogging), median(i.contended), median(i.commands), median(i.hogging),
			ratios(d.contended, i.contended, true))
		fmt.Fprintf(&b, "| Mutex, 8 clients, hold 2 ms, think 3-6 ms | wait p99 %s, hand-over p50 %s | %s, %s | |\n",
			round(median(d.waitP99)), round(median(d.handoffP50)), round(median(i.waitP99)), round(median(i.handoffP50)))
	}
	if d != nil && d.held != nil {
		fmt.Fprintf(&b, "| 10,000 leases held by one Client | %.0f Redis commands/s, %.1f MB heap | | |\n", d.held.commandsPerSec, d.held.heapMB)
	}
	if len(typeRows) == 0 {
		return b.String()
	}
	label := ""
	if len(typeRows) > 0 && typeRows[0].Before != nil {
		label = beforeLabel
	}
	fmt.Fprintf(&b, "\n| uncontended lock+unlock | dlock | %s | server CPU, now / before |\n|---|---|---|---|\n", or(label, "before"))
	for _, t := range typeRows {
		now := fmt.Sprintf("%s, server CPU %s, %.0f commands, %.1f µs a script", round(t.Pair), round(t.CPU), t.Commands, t.PerCall)
		before, ratio := "", ""
		if o := t.Before; o != nil {
			before = fmt.Sprintf("%s, %s, %.0f, %.1f", round(o.Pair), round(o.CPU), o.Commands, o.PerCall)
			ratio = fmt.Sprintf("%.2f×", float64(t.CPU)/float64(max(o.CPU, 1)))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, now, before, ratio)
	}
	return b.String()
}

// writeReadme replaces the table between the markers begin and end in path.
func writeReadme(path, begin, end, table string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	before, rest, ok1 := strings.Cut(string(old), begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		return fmt.Errorf("%s has no %q ... %q markers", path, begin, end)
	}
	return os.WriteFile(path, []byte(before+begin+"\n"+table+end+after), 0o644)
}

// or is s, or else def when s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
