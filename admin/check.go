package admin

import "strconv"

// Severity says how much a [Problem] found by dlock.Client.Check matters.
// Greater is worse.
type Severity int

const (
	// SeverityWarning: a guarantee could not be confirmed, or holds only
	// until the server's configuration changes.
	SeverityWarning Severity = iota + 1

	// SeverityError: a guarantee of dlock does not hold on the node: two
	// owners can hold a lock at once.
	SeverityError
)

// String returns "warning" or "error".
func (s Severity) String() string {
	switch s {
	case SeverityWarning:
		return "warning"
	case SeverityError:
		return "error"
	}
	return "severity(" + strconv.Itoa(int(s)) + ")"
}

// The names of the checks dlock.Client.Check runs, as [Problem.Check]
// gives them: stable, a program may match on them; more may be added.
const (
	// CheckInfo: the node's INFO could not be read (a network error, or an
	// ACL without +info), so the checks that need it could not run.
	CheckInfo = "info"

	// CheckMaxmemoryPolicy: the node may evict a held lock, and let
	// another owner take it while the first lease counts itself valid.
	// dlock needs maxmemory-policy noeviction (see docs/SAFETY.md).
	CheckMaxmemoryPolicy = "maxmemory-policy"
)

// Problem is something wrong with a node that dlock's guarantees rely on.
type Problem struct {
	Check    string   // which check found it: CheckInfo, CheckMaxmemoryPolicy…
	Severity Severity // how much it matters
	Reason   string   // what is wrong and what to do, for people
}

// NodeReport is what dlock.Client.Check found on one Redis server.
type NodeReport struct {
	Addr     string    // the server's address, as the Redis client knows it ("FailoverClient" for Sentinel's)
	Problems []Problem // none: every check passed
}

// Report is the outcome of dlock.Client.Check: a NodeReport for each
// master the Client reaches, by address.
type Report struct {
	Nodes []NodeReport
}

// Worst returns the highest severity of the report's problems; 0 for none.
func (r *Report) Worst() Severity {
	var worst Severity
	for _, n := range r.Nodes {
		for _, p := range n.Problems {
			worst = max(worst, p.Severity)
		}
	}
	return worst
}
