package dlock

import (
	"errors"
	"fmt"
	"strings"
)

// NodeError is what went wrong on one node of a [Redlock]: its position in
// the clients given to [NewRedlock], its address, and the error (a network
// error, "held by another owner", or why the restart guard keeps the node
// out of the vote, matching [ErrPermission] without +info).
type NodeError struct {
	Node int
	Addr string
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %d (%s): %v", e.Node, e.Addr, e.Err) }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError is a [Redlock] operation that fewer than a majority of nodes
// confirmed in time. An acquisition's matches [ErrNotAcquired] where other
// owners' holds alone keep a majority out (or a majority granted too late),
// [ErrPermission] where permission refusals do too, else [ErrUnavailable].
// An extension's or release's matches [ErrNotHeld] when a majority said the
// hold is not there, else [ErrUnavailable]. It also matches each node's
// error (errors.As finds a *NodeError).
type QuorumError struct {
	Op      string // "lock", "lock (fencing token)", "extend" or "unlock"
	Name    string
	Quorum  int  // nodes needed
	Granted int  // nodes that confirmed
	Late    bool // a quorum confirmed, but too late to leave any validity
	Nodes   []*NodeError
	outcome error // ErrNotAcquired, ErrNotHeld, ErrPermission or ErrUnavailable
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dlock: redlock %s %q: %d of %d nodes needed confirmed", e.Op, e.Name, e.Granted, e.Quorum)
	if e.Late {
		b.WriteString(", too late to leave any validity")
	}
	// The restart guard's reason is said once for all the nodes it keeps out.
	var guarded []string
	for _, n := range e.Nodes {
		if errors.Is(n.Err, errRecovering) {
			guarded = append(guarded, fmt.Sprintf("%d (%s)", n.Node, n.Addr))
		}
	}
	for _, n := range e.Nodes {
		if len(guarded) < 2 || !errors.Is(n.Err, errRecovering) {
			fmt.Fprintf(&b, "; %v", n)
		}
	}
	if len(guarded) > 1 {
		fmt.Fprintf(&b, "; nodes %s: %v (see WithRestartGuard)", strings.Join(guarded, ", "), errRecovering)
	}
	return b.String()
}

// Unwrap returns the outcome sentinel and every node's error.
func (e *QuorumError) Unwrap() []error {
	errs := []error{e.outcome}
	for _, n := range e.Nodes {
		errs = append(errs, n)
	}
	return errs
}
