package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// combineLeases makes one lease of the leases of a MultiLock's groups, each
// held and renewed on its own slot: it ends as lost as soon as any part is
// lost, and is released when all parts are.
func (c *Client) combineLeases(name string, parts []*Lease) *Lease {
	l := &Lease{c: c, name: name, parts: parts, token: parts[0].token, log: parts[0].log, heapIndex: -1}
	for _, p := range parts {
		p.mu.Lock()
		p.whole = l
		risky := p.risky
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
	return l
}

// whenEnded calls f with the lease's end (context.Canceled for a release)
// once it ends; at once if it has.
func (l *Lease) whenEnded(f func(error)) {
	l.mu.Lock()
	if l.isDone() {
		err := l.err
		l.mu.Unlock()
		f(cancelCause(err))
		return
	}
	if l.onEnd == nil {
		l.onEnd = make(map[*func(error)]struct{})
	}
	l.onEnd[&f] = struct{}{}
	l.mu.Unlock()
}

func (l *Lease) partsErr() error {
	l.mu.Lock()
	if l.isDone() {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	for _, p := range l.parts {
		if err := p.Err(); err != nil {
			return err
		}
	}
	return nil
}

// partsDeadline is the earliest of the parts' deadlines: the lease holds
// all its locks until then.
func (l *Lease) partsDeadline() time.Time {
	earliest := l.parts[0].Deadline()
	for _, p := range l.parts[1:] {
		if d := p.Deadline(); d.Before(earliest) {
			earliest = d
		}
	}
	return earliest
}

func (l *Lease) extendParts(ctx context.Context, ttl time.Duration) error {
	for _, p := range l.parts {
		if err := p.Extend(ctx, ttl); err != nil {
			return err // a part refused is lost, and so is l
		}
	}
	return nil
}

// partsTTL is the shortest TTL of the parts.
func (l *Lease) partsTTL(ctx context.Context) (time.Duration, error) {
	var least time.Duration = -1
	for _, p := range l.parts {
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

// unlockParts releases every part, also when one fails; the caller holds
// unlockMu.
func (l *Lease) unlockParts(ctx context.Context) error {
	var errs []error
	for _, p := range l.parts {
		if err := p.Unlock(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		cause := error(errUnlockIncomplete) // or how the first part lost was lost
		for _, p := range l.parts {
			if lost := p.Err(); errors.Is(lost, ErrLeaseLost) {
				cause = lost
				break
			}
		}
		l.end(fmt.Errorf("%w: unlock of %q did not release every lock", cause, l.name))
		return err
	}
	l.end(nil)
	return nil
}
