//go:build faults

package faults

import "flag"

// mutate checks the checker: a soak with -explore.mutate=withhold keeps
// every renewal of each run's first process (client 0's, and the other
// clients that share its connections) from its servers, silently (no
// fault is drawn, counted or doubted), failing each at once as a lost
// reply. Each of that process's leases that a renewal must keep is then
// lost where no fault reaches it, and the checker must call that an
// unexplained loss; the report counts what it called each (mutate.caught,
// mutate.starved, mutate.redlock), the share excused being the checker's
// blind spot under the soak's load.
var mutate = flag.String("explore.mutate", "", "check the checker: withhold (fail every renewal of each run's first process, silently)")

func withholding() bool { return *mutate == "withhold" }

// tallyMutation counts, in a withholding soak, how checkHolds judged the
// losses of the withheld process's clients.
func tallyMutation(s *schedule, out *outcome) {
	if !withholding() {
		return
	}
	for _, j := range out.lossesJudged {
		if s.process[j.client] == s.process[0] {
			out.injected["mutate."+j.verdict]++
		}
	}
}
