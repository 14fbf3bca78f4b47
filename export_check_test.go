package dlock

// Internals of the Client's own check of its nodes that the external tests
// look at.

// WaitNodeCheck waits for c's latest round of node checks to end.
func WaitNodeCheck(c *Client) { <-c.watch.Done() }

// NodeCheckRunning reports whether a round of node checks of c is under way.
func NodeCheckRunning(c *Client) bool {
	select {
	case <-c.watch.Done():
		return false
	default:
		return true
	}
}

// NodeCheckDue makes c look for unchecked nodes at its next use, as it
// does a while after each round.
func NodeCheckDue(c *Client) { c.watch.Due() }
