package dlock

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/dlockio/dlock/internal/clock"
	"github.com/dlockio/dlock/observe"
)

// WithObserver sets the [observe.Observer] of a Client's locks, or of one
// lock, replacing any earlier; WithObserver(nil) turns observation off.
func WithObserver(o *observe.Observer) Option {
	return func(s *settings) { s.observer, s.given = (*hooks)(o), s.given|optObserver }
}

// hooks is the Observer the lock types tell. Each hook point tests a nil
// pointer first, so an unobserved Lock and Unlock allocate nothing more.
type hooks observe.Observer

// observedCall is one acquire call being observed, in the call's context.
type observedCall struct {
	o          *hooks
	kind       observe.Kind
	name       string
	registered bool // the call registered as a waiter: reported once
}

type callKey struct{}

// acquire runs one acquire call observed by o, and watches its lease.
func (o *hooks) acquire(ctx context.Context, kind observe.Kind, name string, try bool, acquire func(context.Context) (*Lease, error)) (*Lease, error) {
	call := &observedCall{o: o, kind: kind, name: name}
	var done func(observe.AcquireDone)
	if o.Acquire != nil {
		var callCtx context.Context
		callCtx, done = o.Acquire(ctx, observe.AcquireCall{Kind: kind, Name: name, Try: try})
		ctx = cmp.Or(callCtx, ctx)
	}
	l, err := acquire(context.WithValue(ctx, callKey{}, call))
	defer releaseOnPanic(ctx, l) // done and watch run while l is not yet the caller's
	if done != nil {
		d := observe.AcquireDone{Outcome: outcomeOf(err), Waited: call.registered, Err: err}
		if l != nil {
			d.Token = l.token
		}
		done(d)
	}
	if l != nil {
		o.watch(l, kind)
	}
	return l, err
}

// releaseOnPanic, deferred around a hook run while l is not yet its
// caller's, gives l up if the hook panics. A caller that recovers (net/http
// does) would have no lease to unlock, renewed for ever. The panic goes on.
func releaseOnPanic(ctx context.Context, l *Lease) {
	if l == nil {
		return
	}
	if r := recover(); r != nil {
		_ = l.giveUp(context.WithoutCancel(ctx))
		panic(r)
	}
}

// handedOver reports that a release handed the call l, not returned yet.
func (c *observedCall) handedOver(ctx context.Context, l *Lease) {
	defer releaseOnPanic(ctx, l)
	c.wait(ctx, observe.WaitHandedOver, nil)
}

// outcomeOf classes what an acquire call returned.
func outcomeOf(err error) observe.Outcome {
	switch {
	case err == nil:
		return observe.OutcomeAcquired
	case errors.Is(err, context.Canceled):
		return observe.OutcomeCanceled
	case errors.Is(err, ErrNotAcquired):
		return observe.OutcomeNotAcquired
	}
	return observe.OutcomeError
}

// callIn is the observed call ctx carries, or nil (at once when o is nil).
func (o *hooks) callIn(ctx context.Context) *observedCall {
	if o == nil {
		return nil
	}
	call, _ := ctx.Value(callKey{}).(*observedCall)
	return call
}

// wait reports a step of the call's wait; a nil call reports nothing.
func (c *observedCall) wait(ctx context.Context, step observe.WaitStep, err error) {
	if c == nil {
		return
	}
	if step == observe.WaitRegistered {
		if c.registered {
			return
		}
		c.registered = true
	}
	if c.o.Wait != nil {
		c.o.Wait(ctx, observe.WaitEvent{Kind: c.kind, Name: c.name, Step: step, Err: err})
	}
}

// leaseObs is how a lease returned to a caller tells its observer about
// itself. A MultiLock's parts get one from the whole's, marked part: they
// report renewals, and the whole lease reports the rest.
type leaseObs struct {
	o        *hooks
	info     observe.LeaseInfo
	acquired time.Time
	part     bool
}

// watch makes l, just acquired, report to o; if lost already, its end.
func (o *hooks) watch(l *Lease, kind observe.Kind) {
	ob := &leaseObs{o: o, info: observe.LeaseInfo{Kind: kind, Name: l.name, Token: l.token}, acquired: time.Now()}
	if kind == observe.KindElection && o.Leader != nil {
		o.Leader(observe.LeaderEvent{Name: l.name, Term: l.token, Leading: true})
	}
	l.mu.Lock()
	ending := l.state >= leaseEnding // end reads obs under the same lock, as it steps to leaseEnding
	if !ending {
		l.obs.Store(ob)
	}
	l.mu.Unlock()
	if ending {
		<-l.Done()
		ob.ended(l.Err())
	}
}

// observer is what l reports to: its own, or, for a MultiLock's part, one
// made from its whole's once that is watched.
func (l *Lease) observer() *leaseObs {
	if ob := l.obs.Load(); ob != nil {
		return ob
	}
	l.mu.Lock()
	whole := l.whole()
	l.mu.Unlock()
	if whole == nil {
		return nil
	}
	wob := whole.lease.obs.Load()
	if wob == nil {
		return nil
	}
	ob := &leaseObs{o: wob.o, info: observe.LeaseInfo{Kind: wob.info.Kind, Name: l.name, Token: l.token}, part: true}
	l.obs.Store(ob)
	return ob
}

// ended reports the end of the lease ob watches: err nil when released.
func (ob *leaseObs) ended(err error) {
	if ob.part {
		return
	}
	o := ob.o
	if o.End != nil {
		ev := observe.LeaseEnd{LeaseInfo: ob.info, Held: time.Since(ob.acquired), Err: err}
		if err != nil && !errors.As(err, &ev.Lost) { // a lost lease's error says how, as far as it knows
			ev.Lost = LossUnknown
		}
		o.End(ev)
	}
	if ob.info.Kind == observe.KindElection && o.Leader != nil {
		o.Leader(observe.LeaderEvent{Name: ob.info.Name, Term: ob.info.Token})
	}
}

// unlock is Unlock, observed.
func (ob *leaseObs) unlock(ctx context.Context, l *Lease) error {
	ctx, done := ob.releasing(ctx, l)
	err := l.unlock(ctx, voidIfCopied)
	if done != nil {
		done(err)
	}
	return err
}

// releasing calls the Release hook, if set; a panicking hook releases l first.
func (ob *leaseObs) releasing(ctx context.Context, l *Lease) (context.Context, func(error)) {
	if ob.o.Release == nil {
		return ctx, nil
	}
	defer func() {
		if r := recover(); r != nil {
			_ = l.unlock(ctx, voidIfCopied)
			panic(r)
		}
	}()
	callCtx, done := ob.o.Release(ctx, ob.info)
	return cmp.Or(callCtx, ctx), done
}

// renewal is the report of a renewal's answer, due being the deadline
// before it on the lease's clock; empty when ob is nil.
func (ob *leaseObs) renewal(clk *clock.Clock, due time.Time, result observe.RenewalResult, err error) renewalReport {
	if ob == nil || ob.o.Renewal == nil {
		return renewalReport{}
	}
	ev := observe.RenewalEvent{LeaseInfo: ob.info, Result: result, Err: err}
	if result == observe.RenewalOK {
		ev.Margin = clk.Until(due)
	}
	return renewalReport{ob.o.Renewal, ev}
}

// renewalReport is a Renewal event told once the renewal let go of its
// batch's leases, so that a slow hook delays no renewal.
type renewalReport struct {
	hook func(observe.RenewalEvent) // nil: nothing to tell
	ev   observe.RenewalEvent
}

func (r renewalReport) tell() {
	if r.hook != nil {
		r.hook(r.ev)
	}
}

// extended reports an Extend of l to ttl that returned err.
func (l *Lease) extended(ttl time.Duration, err error) {
	ob := l.obs.Load()
	if ob == nil || ob.part || ob.o.Extend == nil || errors.Is(err, ErrInvalid) {
		return
	}
	ev := observe.ExtendEvent{LeaseInfo: ob.info, TTL: ttl, Result: observe.RenewalFailed, Err: err}
	switch {
	case err == nil:
		ev.Result = observe.RenewalOK
	case errors.Is(err, errConfirmedLate): // lost, but not refused
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrLeaseLost):
		ev.Result = observe.RenewalRefused
	}
	ob.o.Extend(ev)
}
