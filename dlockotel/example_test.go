package dlockotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlockotel"
)

// Metrics of a Client's locks. In production, pass your MeterProvider (one
// that exports, to Prometheus or an OTLP collector), or none to use otel's
// global one; here an in-memory reader shows what was recorded. The
// example runs on miniredis, an in-process Redis.
func Example() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	obs, err := dlockotel.NewObserver(dlockotel.WithMeterProvider(meters))
	if err != nil {
		panic(err)
	}
	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer locks.Close()

	ctx := context.Background()
	lease, err := locks.Mutex("orders:42").Lock(ctx)
	if err != nil {
		panic(err)
	}
	_ = lease.Unlock(ctx)

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	metrics := rm.ScopeMetrics[0].Metrics
	slices.SortFunc(metrics, func(a, b metricdata.Metrics) int { return strings.Compare(a.Name, b.Name) })
	for _, m := range metrics {
		switch data := m.Data.(type) {
		case metricdata.Histogram[float64]:
			p := data.DataPoints[0]
			kind, _ := p.Attributes.Value("dlock.kind")
			fmt.Printf("%s (%s): %d, kind %s\n", m.Name, m.Unit, p.Count, kind.AsString())
		case metricdata.Sum[int64]:
			fmt.Printf("%s (%s): %d now\n", m.Name, m.Unit, data.DataPoints[0].Value)
		}
	}
	// Output:
	// dlock.acquire.duration (s): 1, kind mutex
	// dlock.held ({lease}): 0 now
	// dlock.hold.duration (s): 1, kind mutex
}
