package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// partsHold is a MultiLock's hold of several groups: their leases (parts),
// each renewed on its own. The whole has no timer: its deadline is its
// parts' earliest, and it is at risk or lost as soon as a part is.
type partsHold struct {
	lease *Lease
	parts []*Lease
}

// combineLeases makes one lease of the leases of a MultiLock's groups.
func (c *Client) combineLeases(name string, parts []*Lease) *Lease {
	first := parts[0]
	l := &Lease{name: name, token: first.token, rules: first.rules, ttl: first.currentTTL(), clock: first.clock, state: leaseHeld}
	h := &partsHold{lease: l, parts: parts}
	l.hold = h
	for _, p := range parts {
		p.mu.Lock()
		p.signal().whole = h
		risky := p.risky()
		p.mu.Unlock()
		if risky {
			l.markRisky()
		}
		p.whenEnded(func(err error) {
			if errors.Is(err, ErrLeaseLost) {
				l.end(fmt.Errorf("%w (%q of %q)", err, p.name, name))
			}
		})
	}
	h.partMoved()
	return l
}

// partMoved sets the whole's deadline to its parts' earliest, read under
// the whole's lock so that the last part to move writes what all say.
func (h *partsHold) partMoved() {
	l := h.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, p := range h.parts {
		p.mu.Lock()
		if d := p.deadline; i == 0 || d.Before(l.deadline) {
			l.deadline = d
		}
		p.mu.Unlock()
	}
}

// extend extends each part in turn: a part refused is lost, and so is the
// whole. Each part judges its own Extend and moves the whole's deadline.
func (h *partsHold) extend(ctx context.Context, ttl time.Duration, _ time.Time) (loss, err error) {
	for _, p := range h.parts {
		if err := p.Extend(ctx, ttl); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// ttl is the shortest TTL of the parts.
func (h *partsHold) ttl(ctx context.Context) (time.Duration, error) {
	var least time.Duration = -1
	for _, p := range h.parts {
		ttl, err := p.TTL(ctx)
		if err != nil {
			return 0, err
		}
		if least < 0 || (ttl >= 0 && ttl < least) {
			least = ttl
		}
	}
	return least, nil
}

// release releases every part, also when one fails.
func (h *partsHold) release(ctx context.Context, _ voidRule) (loss, err error) {
	var errs []error // Join drops the nils
	for _, p := range h.parts {
		errs = append(errs, p.Unlock(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		cause := error(errUnlockIncomplete) // or how the first part lost was lost
		for _, p := range h.parts {
			if lost := p.Err(); errors.Is(lost, ErrLeaseLost) {
				cause = lost
				break
			}
		}
		return fmt.Errorf("%w: unlock of %q did not release every lock", cause, h.lease.name), err
	}
	return nil, nil
}

func (h *partsHold) renewAt(time.Time) {} // each part renews itself

func (h *partsHold) addTokens(tokens map[string]uint64) {
	for _, p := range h.parts {
		p.hold.addTokens(tokens)
	}
}
