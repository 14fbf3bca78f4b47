package dlockotel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlockio/dlock"
)

// go-redis's redisotel records each command's arguments as db.statement,
// and a lock's scripts take its owner token as an argument. The README
// says to turn that off beside dlock; this test holds it to what it says.
func TestOwnerToken_RedisotelRecordsItUnlessDBStatementIsOff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []redisotel.TracingOption
		wantToken bool
	}{
		{"default", nil, true},
		{"WithDBStatement(false)", []redisotel.TracingOption{redisotel.WithDBStatement(false)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			rdb := sharedRedis(t)
			if err := redisotel.InstrumentTracing(rdb, append(tc.opts, redisotel.WithTracerProvider(tp))...); err != nil {
				t.Fatal(err)
			}
			c, err := dlock.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			ctx := ctxFor(t, 10*time.Second)
			name := lockName(t)
			lease, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			owner, err := rdb.Get(ctx, dlock.DefaultPrefix+"{"+name+"}").Result()
			if err != nil || owner == "" {
				t.Fatalf("reading the owner token: %q, %v", owner, err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, s := range spans.Ended() {
				for _, kv := range s.Attributes() {
					if strings.Contains(kv.Value.Emit(), owner) {
						found = true
					}
				}
			}
			if found != tc.wantToken {
				t.Fatalf("owner token in redisotel's spans: %v, want %v", found, tc.wantToken)
			}
		})
	}
}
