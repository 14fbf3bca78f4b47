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
// gives them. They are stable: a program may match on them. Checks may be
// added.
const (
	// CheckInfo: the node's INFO could not be read (a network error, or an
	// ACL without +info), so the checks that need it could not run. Locks
	// work without +info (but a Redlock's restart guard needs it).
	CheckInfo = "info"

	// CheckMaxmemoryPolicy: the node may evict dlock's keys. Under
	// allkeys-* policies Redis may delete any key once it reaches
	// maxmemory, and under volatile-* any key with a TTL, which every held
	// lock has: a held lock vanishes and another owner gets it while the
	// first lease still counts itself valid. No lock on Redis is safe
	// there; dlock needs maxmemory-policy noeviction.
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

// Worst returns the highest severity among the report's problems, or 0
// when there is none.
func (r *Report) Worst() Severity {
	var worst Severity
	for _, n := range r.Nodes {
		for _, p := range n.Problems {
			worst = max(worst, p.Severity)
		}
	}
	return worst
}
