//go:build faults

package faults

import (
	"flag"
	"fmt"
	"strings"
)

// mutate checks the checker: a soak with -explore.mutate=withhold keeps
// every renewal of each run's client 0 from its servers, silently (no
// fault is drawn, counted or doubted), as a renewer that stopped would.
// Each lease of client 0 that a renewal must keep is then lost where no
// fault reaches it, and the checker must call that an unexplained loss;
// the report counts what it called each (mutate.caught, mutate.starved),
// the share excused as starvation being the checker's blind spot under
// the soak's load.
var mutate = flag.String("explore.mutate", "", "check the checker: withhold (keep every renewal of client 0 from Redis, silently)")

func withholding() bool { return *mutate == "withhold" }

// tallyMutation counts, in a withholding soak, how the checker judged
// the losses of client 0's process (its clients share its connections)
// where no fault reaches them.
func tallyMutation(s *schedule, out *outcome) {
	if !withholding() {
		return
	}
	withheld := func(msg, prefix string) bool {
		var client int
		_, err := fmt.Sscanf(strings.TrimPrefix(msg, prefix), "client %d ", &client)
		return strings.HasPrefix(msg, prefix) && err == nil && client < len(s.process) && s.process[client] == s.process[0]
	}
	for _, v := range out.violations {
		if withheld(v, "unexplained loss: ") {
			out.injected["mutate.caught"]++
		}
	}
	for _, n := range out.notes {
		if withheld(n, "") && strings.Contains(n, " lost, its process starved ") {
			out.injected["mutate.starved"]++
		}
	}
}
