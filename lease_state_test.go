package dlock

import "testing"

// TestLeaseState_OnlyLegalStepsAreTaken checks every step between two
// states against the table of legal ones: a lease confirms, is handed
// over or released only before it ends, ends once, and is marked released
// only after it ended.
func TestLeaseState_OnlyLegalStepsAreTaken(t *testing.T) {
	legal := map[[2]leaseState]bool{
		{leaseUnconfirmed, leaseHandedOver}: true,
		{leaseUnconfirmed, leaseHeld}:       true,
		{leaseUnconfirmed, leaseReleasing}:  true,
		{leaseUnconfirmed, leaseEnding}:     true,
		{leaseHandedOver, leaseHeld}:        true,
		{leaseHandedOver, leaseReleasing}:   true,
		{leaseHandedOver, leaseEnding}:      true,
		{leaseHeld, leaseReleasing}:         true,
		{leaseHeld, leaseEnding}:            true,
		{leaseReleasing, leaseEnding}:       true,
		{leaseEnding, leaseEnded}:           true,
		{leaseEnded, leaseReleased}:         true,
	}
	for from := leaseUnconfirmed; from <= leaseReleased; from++ {
		for next := leaseUnconfirmed; next <= leaseReleased; next++ {
			l := &Lease{state: from}
			took := l.step(next)
			if want := legal[[2]leaseState{from, next}]; took != want {
				t.Errorf("step %d -> %d: took %v, want %v", from, next, took, want)
			}
			if want := map[bool]leaseState{true: next, false: from}[took]; l.state != want {
				t.Errorf("step %d -> %d: state %d after, want %d", from, next, l.state, want)
			}
		}
	}
}
