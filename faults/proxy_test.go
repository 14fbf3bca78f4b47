//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// toxiServer is the Toxiproxy every proxy of the test process belongs to;
// it runs in-process, no HTTP API.
var toxiServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())

// proxy stands between clients and one redis-server, on a free loopback
// port, so that a test can degrade the link: latency, dropped data,
// resets, sliced packets. Each client may get its own, for asymmetric
// partitions.
type proxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	p := toxiproxy.NewProxy(toxiServer, fmt.Sprintf("%s-%s", t.Name(), upstream), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("starting a proxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &proxy{t: t, p: p}
}

// Addr is where clients connect.
func (p *proxy) Addr() string { return p.p.Listen }

// toxic is one fault on a proxy's link: a Toxiproxy toxic type and its
// attributes. Stream "downstream" affects replies, "upstream" requests.
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]int `json:"attributes"`
}

func latency(stream string, ms, jitterMS int) toxic {
	return toxic{Name: "latency-" + stream, Type: "latency", Stream: stream, Toxicity: 1,
		Attributes: map[string]int{"latency": ms, "jitter": jitterMS}}
}

func sliced(stream string) toxic {
	return toxic{Name: "slicer-" + stream, Type: "slicer", Stream: stream, Toxicity: 1,
		Attributes: map[string]int{"average_size": 8, "size_variation": 6, "delay": 200}}
}

// dropped keeps every byte from getting through, until removed.
func dropped(stream string) toxic {
	return toxic{Name: "timeout-" + stream, Type: "timeout", Stream: stream, Toxicity: 1,
		Attributes: map[string]int{"timeout": 0}}
}

// add puts the toxic on the link until remove (or the end of the test).
func (p *proxy) add(tx toxic) {
	p.t.Helper()
	body, err := json.Marshal(tx)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
		p.t.Fatalf("adding toxic %s: %v", tx.Name, err)
	}
}

func (p *proxy) remove(name string) {
	p.t.Helper()
	if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		p.t.Fatalf("removing toxic %s: %v", name, err)
	}
}

// cut closes every connection through the proxy (a reset) and refuses new
// ones until restore.
func (p *proxy) cut() { p.p.Stop() }

func (p *proxy) restore() {
	p.t.Helper()
	if err := p.p.Start(); err != nil {
		p.t.Fatalf("restarting the proxy: %v", err)
	}
}

// flap drops every reply for on, lets them through for off, over and
// over, until the returned stop is called (it waits for the last drop to
// end).
func (p *proxy) flap(on, off time.Duration) (stop func()) {
	quit := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			p.add(dropped("downstream"))
			<-time.After(on)
			p.remove("timeout-downstream")
			select {
			case <-quit:
				return
			case <-time.After(off):
			}
		}
	}()
	return func() {
		close(quit)
		<-stopped
	}
}
