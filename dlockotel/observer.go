package dlockotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/observe"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/dlockio/dlock/dlockotel"

// Option configures [NewObserver].
type Option func(*config)

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	group   func(name string) string
}

// WithMeterProvider sets where the metrics go (default: otel's global
// MeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.meters = mp } }

// WithTracerProvider sets where the spans go (default: otel's global
// TracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tracers = tp } }

// WithLockGroup adds the attribute dlock.lock.group to every metric and
// span: group's answer for the lock's name ("" leaves it out). Keep the
// answers few, such as a name's prefix ("orders:42" → "orders"): each
// group is a time series of every instrument. A MultiLock's name is its
// names, sorted, joined by commas.
func WithLockGroup(group func(name string) string) Option {
	return func(c *config) { c.group = group }
}

// Attribute keys.
const (
	keyKind            = attribute.Key("dlock.kind")
	keyGroup           = attribute.Key("dlock.lock.group")
	keyOutcome         = attribute.Key("dlock.outcome")
	keyReleaseReason   = attribute.Key("dlock.release.reason")
	keyRenewalResult   = attribute.Key("dlock.renewal.result")
	keyExtensionResult = attribute.Key("dlock.extension.result")
	keyLossReason      = attribute.Key("dlock.loss.reason")
	keyTry             = attribute.Key("dlock.try")
	keyWaited          = attribute.Key("dlock.waited")
	keyFencingToken    = attribute.Key("dlock.fencing_token")
	keyErrorType       = attribute.Key("error.type")
)

// observer turns dlock's events into instruments and spans.
type observer struct {
	tracer trace.Tracer
	group  func(string) string
	inst   instruments
	hand   handovers
}

// NewObserver returns an Observer that records metrics and spans, for
// [dlock.WithObserver]. It fails only when an instrument cannot be made.
func NewObserver(opts ...Option) (*observe.Observer, error) {
	cfg := config{}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.meters == nil {
		cfg.meters = otel.GetMeterProvider()
	}
	if cfg.tracers == nil {
		cfg.tracers = otel.GetTracerProvider()
	}
	o := &observer{tracer: cfg.tracers.Tracer(ScopeName), group: cfg.group}
	if err := o.inst.make(cfg.meters.Meter(ScopeName)); err != nil {
		return nil, err
	}
	return &observe.Observer{
		Acquire: o.acquire,
		Wait:    o.wait,
		Release: o.release,
		Renewal: o.renewal,
		Extend:  o.extend,
		End:     o.end,
		Leader:  o.leader,
	}, nil
}

// attrs are the attributes every instrument has, then extra.
func (o *observer) attrs(kind observe.Kind, name string, extra ...attribute.KeyValue) metric.MeasurementOption {
	kv := make([]attribute.KeyValue, 0, 2+len(extra))
	kv = append(kv, keyKind.String(string(kind)))
	if o.group != nil {
		if g := o.group(name); g != "" {
			kv = append(kv, keyGroup.String(g))
		}
	}
	return metric.WithAttributes(append(kv, extra...)...)
}

// call is one acquire call under way. It travels in the call's context,
// where Wait finds it; a call's events come from its own goroutine, one
// after the other.
type call struct {
	start      time.Time
	kind       observe.Kind
	name       string
	span       trace.Span
	registered bool
	handedAt   time.Time // when a release handed it the lock
}

type callKey struct{}

func (o *observer) acquire(ctx context.Context, ac observe.AcquireCall) (context.Context, func(observe.AcquireDone)) {
	c := &call{start: time.Now(), kind: ac.Kind, name: ac.Name}
	spanAttrs := []attribute.KeyValue{keyKind.String(string(ac.Kind)), keyTry.Bool(ac.Try)}
	if o.group != nil {
		if g := o.group(ac.Name); g != "" {
			spanAttrs = append(spanAttrs, keyGroup.String(g))
		}
	}
	ctx, c.span = o.tracer.Start(ctx, "dlock.acquire", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(spanAttrs...))
	return context.WithValue(ctx, callKey{}, c), func(d observe.AcquireDone) { o.acquired(c, d) }
}

func (o *observer) acquired(c *call, d observe.AcquireDone) {
	now := time.Now()
	extra := []attribute.KeyValue{keyOutcome.String(string(d.Outcome))}
	if d.Outcome == observe.OutcomeError {
		extra = append(extra, keyErrorType.String(errorType(d.Err)))
	}
	bg := context.Background()
	o.inst.acquireDuration.Record(bg, now.Sub(c.start).Seconds(), o.attrs(c.kind, c.name, extra...))
	if c.registered {
		o.inst.waiting.Add(bg, -1, o.attrs(c.kind, c.name))
	}
	if d.Outcome == observe.OutcomeAcquired {
		o.inst.held.Add(bg, 1, o.attrs(c.kind, c.name))
	}
	if released, ok := o.hand.taken(c.name, c.registered, d.Outcome == observe.OutcomeAcquired); ok {
		at := now
		if !c.handedAt.IsZero() {
			at = c.handedAt
		}
		o.inst.handover.Record(bg, at.Sub(released).Seconds(), o.attrs(c.kind, c.name))
	}

	c.span.SetAttributes(extra...)
	c.span.SetAttributes(keyWaited.Bool(d.Waited))
	if d.Outcome == observe.OutcomeAcquired {
		c.span.SetAttributes(keyFencingToken.Int64(int64(d.Token)))
	}
	if d.Outcome == observe.OutcomeError {
		c.span.SetStatus(codes.Error, d.Err.Error())
	}
	c.span.End()
}

func (o *observer) wait(ctx context.Context, ev observe.WaitEvent) {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return // not a call of this observer's
	}
	var opts []trace.EventOption
	switch ev.Step {
	case observe.WaitRegistered:
		c.registered = true
		o.inst.waiting.Add(context.Background(), 1, o.attrs(c.kind, c.name))
		o.hand.registered(c.name)
	case observe.WaitHandedOver:
		c.handedAt = time.Now()
	case observe.WaitRetry:
		if ev.Err != nil {
			opts = append(opts, trace.WithAttributes(keyErrorType.String(errorType(ev.Err))))
		}
	}
	c.span.AddEvent("dlock.wait."+string(ev.Step), opts...)
}

func (o *observer) release(ctx context.Context, l observe.LeaseInfo) (context.Context, func(error)) {
	o.hand.releasing(l.Name)
	attrs := []attribute.KeyValue{keyKind.String(string(l.Kind)), keyFencingToken.Int64(int64(l.Token))}
	if o.group != nil {
		if g := o.group(l.Name); g != "" {
			attrs = append(attrs, keyGroup.String(g))
		}
	}
	ctx, span := o.tracer.Start(ctx, "dlock.release", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.SetAttributes(keyErrorType.String(errorType(err)))
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

func (o *observer) renewal(ev observe.RenewalEvent) {
	bg := context.Background()
	o.inst.renewals.Add(bg, 1, o.attrs(ev.Kind, ev.Name, keyRenewalResult.String(string(ev.Result))))
	if ev.Result == observe.RenewalOK {
		o.inst.margin.Record(bg, ev.Margin.Seconds(), o.attrs(ev.Kind, ev.Name))
	}
}

func (o *observer) extend(ev observe.ExtendEvent) {
	o.inst.extensions.Add(context.Background(), 1, o.attrs(ev.Kind, ev.Name, keyExtensionResult.String(string(ev.Result))))
}

func (o *observer) end(ev observe.LeaseEnd) {
	bg := context.Background()
	reason := "released"
	if ev.Lost != "" {
		reason = "lost_" + string(ev.Lost)
		o.inst.lost.Add(bg, 1, o.attrs(ev.Kind, ev.Name, keyLossReason.String(string(ev.Lost))))
	}
	o.inst.holdDuration.Record(bg, ev.Held.Seconds(), o.attrs(ev.Kind, ev.Name, keyReleaseReason.String(reason)))
	o.inst.held.Add(bg, -1, o.attrs(ev.Kind, ev.Name))
}

func (o *observer) leader(ev observe.LeaderEvent) {
	n := int64(-1)
	if ev.Leading {
		n = 1
	}
	o.inst.leader.Add(context.Background(), n, o.attrs(observe.KindElection, ev.Name))
}

// errorType classes an error for the error.type attribute: a few values,
// never the message.
func errorType(err error) string {
	for _, e := range []struct {
		target error
		name   string
	}{
		{dlock.ErrUnavailable, "unavailable"},
		{dlock.ErrWrongType, "wrong_type"},
		{dlock.ErrPermission, "permission"},
		{dlock.ErrClosed, "closed"},
		{dlock.ErrPermits, "permits"},
		{dlock.ErrUpgrade, "upgrade"},
		{dlock.ErrReplicaAck, "replica_ack"},
		{dlock.ErrNotHeld, "not_held"},
		{dlock.ErrLeaseLost, "lease_lost"},
		{dlock.ErrNotAcquired, "not_acquired"},
		{context.DeadlineExceeded, "timeout"},
	} {
		if errors.Is(err, e.target) {
			return e.name
		}
	}
	return "_OTHER"
}
