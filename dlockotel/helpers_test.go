package dlockotel_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlockotel"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/observe"
)

// One redis-server for the tests that need no server of their own.
var (
	shared         = redistest.NewShared()
	standaloneOnce sync.Once
	standalone     *redistest.Server
)

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	os.Exit(code)
}

func sharedRedis(t testing.TB) *redis.Client {
	standaloneOnce.Do(func() { standalone = redistest.Start(shared) })
	rdb := redis.NewClient(&redis.Options{Addr: standalone.Addr()}) // its own: the server's Client is shared, and this one is closed
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

var nameSeq atomic.Int64

// lockName is a lock name no other test uses.
func lockName(t testing.TB) string {
	return fmt.Sprintf("%s#%d", t.Name(), nameSeq.Add(1))
}

// ctxFor is a context that fails the test's wait instead of hanging forever
// when something is broken. It is a guard, never a synchronisation.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// telemetry is an observer recording into the SDK's in-memory reader and
// span recorder.
type telemetry struct {
	obs    *observe.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	losses chan observe.LeaseEnd // each lease lost, once the observer has recorded it
}

func newTelemetry(t *testing.T, opts ...dlockotel.Option) *telemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	obs, err := dlockotel.NewObserver(append([]dlockotel.Option{
		dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	tel := &telemetry{obs: obs, reader: reader, spans: spans, losses: make(chan observe.LeaseEnd, 64)}
	record := obs.End
	obs.End = func(ev observe.LeaseEnd) {
		record(ev)
		if ev.Lost != "" {
			tel.losses <- ev
		}
	}
	return tel
}

// waitLoss returns once the observer has recorded a lost lease: a loss is
// told after the lease's Done closes, on a goroutine of its own.
func (tel *telemetry) waitLoss(t *testing.T) observe.LeaseEnd {
	t.Helper()
	select {
	case ev := <-tel.losses:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no loss recorded within 5s")
		return observe.LeaseEnd{}
	}
}

// client is a dlock Client observed by tel, on its own connections.
func (tel *telemetry) client(t *testing.T, opts ...dlock.Option) *dlock.Client {
	c, err := dlock.New(sharedRedis(t), append([]dlock.Option{dlock.WithObserver(tel.obs)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (tel *telemetry) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

func (tel *telemetry) metric(t *testing.T, name string) (metricdata.Metrics, bool) {
	t.Helper()
	for _, sm := range tel.collect(t).ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// has reports whether set has every attribute of want.
func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum is the value of the counter or up-down counter name over the points
// with the attributes want.
func (tel *telemetry) sum(t *testing.T, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := tel.metric(t, name)
	if !ok {
		return 0
	}
	data, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, not an int64 sum", name, m.Data)
	}
	var n int64
	for _, p := range data.DataPoints {
		if has(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// histogram is the count and sum of the histogram name over the points
// with the attributes want.
func (tel *telemetry) histogram(t *testing.T, name string, want ...attribute.KeyValue) (count uint64, sum float64) {
	t.Helper()
	m, ok := tel.metric(t, name)
	if !ok {
		return 0, 0
	}
	data, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, not a float64 histogram", name, m.Data)
	}
	for _, p := range data.DataPoints {
		if has(p.Attributes, want) {
			count += p.Count
			sum += p.Sum
		}
	}
	return count, sum
}

// unit is the unit of the instrument name.
func (tel *telemetry) unit(t *testing.T, name string) string {
	m, ok := tel.metric(t, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return m.Unit
}

// span is the only ended span called name, failing the test otherwise.
func (tel *telemetry) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %s, want 1", len(found), name)
	}
	return found[0]
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func eventNames(s sdktrace.ReadOnlySpan) string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return strings.Join(names, " ")
}

// signal wraps f to close ch the first time when(ev) holds.
func signal[E any](f func(E), when func(E) bool) (func(E), <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func(ev E) {
		f(ev)
		if when(ev) {
			once.Do(func() { close(ch) })
		}
	}, ch
}

func waitFor(t *testing.T, ch <-chan struct{}, guard time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("%s did not happen within %v", what, guard)
	}
}

var (
	kindMutex = attribute.String("dlock.kind", "mutex")
)
