package dlock

// Internals of the Client's own check of its nodes that the external tests
// look at.

// WaitNodeCheck waits for c's latest round of node checks to end.
func WaitNodeCheck(c *Client) {
	c.mu.Lock()
	done := c.watch.done
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}

// NodeCheckRunning reports whether a round of node checks of c is under way.
func NodeCheckRunning(c *Client) bool {
	c.mu.Lock()
	done := c.watch.done
	c.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// NodeCheckDue makes c look for unchecked nodes at its next use, as it
// does a while after each round.
func NodeCheckDue(c *Client) {
	c.mu.Lock()
	c.watch.due = true
	c.mu.Unlock()
}
