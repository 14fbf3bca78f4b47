//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
)

// The explorer's network layer: in a run with the network fault, every
// process's connections to the run's standalone server, or to each node
// of its cluster (replicas too, where it has them), and to each Redlock
// master go through a Toxiproxy proxy of their own (one per process and
// node), and the schedule puts toxics on one link at a time for a while:
// one process's link to one node, or every process's link to it (the
// node's own network). A cluster's clients follow the addresses CLUSTER
// SLOTS and MOVED name, the nodes' own, so a process's ClusterClient
// dials through a go-redis Dialer that picks the node's proxy by the
// address dialled (exploreEnv.newRedis); a dial to an address with no
// proxy is counted, and a violation (the fault would have missed it).
// The nodes' own cluster bus is not proxied: a toxic costs clients their
// link, never the cluster its view of a node. The checks' and the late
// copies' connections go direct.
//
// Nothing here is outside what dlock promises: a slow, reset or silent
// link may cost leases (reported lost) and make Unlocks fail, but never
// two holders at once, a token going back, or an orphaned hold past its
// TTL.

// netToxics are the toxics a network fault puts on a link.
var netToxics = []string{"latency", "jitter", "bandwidth", "reset", "timeout"}

// netFault is one toxic on one link, for a while.
type netFault struct {
	At     time.Duration // after the run's start
	For    time.Duration
	Node   int // 0: the run's server (a cluster's: Target); 1-3: a Redlock master
	Target int // on a cluster, which of its nodes is the run's server, modulo their number
	Proc   int // whose link, by process; past the last: every process's
	Toxic  string
	Stream string // "upstream": requests; "downstream": replies
	Size   int    // latency or jitter (ms), rate (KB/s), or a reset's delay (ms)
}

// netSchedule draws the run's network faults from a stream of their own,
// so that adding them changed no other part of any schedule. They fall
// within the first seconds, while clients contend; each lasts up to a
// second and a half, past a third of most TTLs.
func netSchedule(p params) []netFault {
	if !p.has("network") {
		return nil
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0x6e6574))
	// A cluster node is drawn from a stream of its own: every run keeps the
	// faults it drew before cluster nodes were proxied.
	target := rand.New(rand.NewPCG(p.Seed, netClusterStream))
	var out []netFault
	for range 2 + rng.IntN(4) {
		f := netFault{At: time.Duration(100+rng.IntN(3000)) * time.Millisecond,
			For: time.Duration(200+rng.IntN(1300)) * time.Millisecond, Node: rng.IntN(4), Proc: rng.IntN(p.Clients + 1),
			Toxic: netToxics[rng.IntN(len(netToxics))], Stream: []string{"upstream", "downstream"}[rng.IntN(2)]}
		f.Target = target.IntN(6)
		switch f.Toxic {
		case "latency":
			f.Size = 20 + rng.IntN(300)
		case "jitter":
			f.Size = 10 + rng.IntN(200)
		case "bandwidth":
			f.Size = 1 + rng.IntN(8) // KB/s: a reply of a few hundred bytes takes tens of ms
		case "reset":
			f.Size = rng.IntN(50)
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b netFault) int { return int(a.At - b.At) })
	return out
}

// toxicFor is f as Toxiproxy takes it.
func (f netFault) toxicFor() toxic {
	tx := toxic{Name: "explore", Stream: f.Stream, Toxicity: 1, Attributes: map[string]int{}}
	switch f.Toxic {
	case "latency":
		tx.Type, tx.Attributes["latency"] = "latency", f.Size
	case "jitter":
		tx.Type, tx.Attributes["latency"], tx.Attributes["jitter"] = "latency", f.Size/2, f.Size
	case "bandwidth":
		tx.Type, tx.Attributes["rate"] = "bandwidth", f.Size
	case "reset":
		tx.Type, tx.Attributes["timeout"] = "reset_peer", f.Size
	case "timeout":
		tx.Type, tx.Attributes["timeout"] = "timeout", 0 // nothing gets through until removed
	}
	return tx
}

// netClusterStream keys the draw of the cluster node a network fault hits.
const netClusterStream = 0x6e6543

// network is a run's proxies, by process and node: the run's server or
// cluster nodes (servers of them), then each Redlock master.
type network struct {
	cluster bool
	servers int
	strays  atomic.Int64         // a ClusterClient's dials to an address with no proxy
	dials   atomic.Int64         // and through one
	procs   []int                // the run's processes, in order
	proxies [][]*toxiproxy.Proxy // by position in procs, then node
	via     []map[string]string  // by position in procs: a node's address to its proxy's
	faults  []netFault
	done    chan struct{}
	count   []string // the toxics put on, by kind
	errs    []string
}

// startNetwork puts a proxy in front of the run's server (standalone) and
// each Redlock master for each process of the run; a run without the
// network fault gets none.
func startNetwork(env *exploreEnv, s *schedule) *network {
	n := &network{faults: netSchedule(s.params), done: make(chan struct{})}
	if len(n.faults) == 0 {
		close(n.done)
		return n
	}
	var upstreams []string
	if env.cluster {
		for _, node := range append(slices.Clone(env.nodes), env.replicas...) {
			upstreams = append(upstreams, node.Addr())
		}
	} else {
		upstreams = append(upstreams, env.nodes[0].Addr())
	}
	n.cluster, n.servers = env.cluster, len(upstreams)
	for _, m := range env.redlock {
		upstreams = append(upstreams, m.Addr())
	}
	for _, proc := range s.process {
		if slices.Contains(n.procs, proc) {
			continue
		}
		n.procs = append(n.procs, proc)
		var proxies []*toxiproxy.Proxy
		via := map[string]string{}
		for _, up := range upstreams {
			var p *toxiproxy.Proxy
			if up != "" {
				p = toxiproxy.NewProxy(toxiServer, fmt.Sprintf("explore-%d-%d-%s", s.Seed, proc, up), "127.0.0.1:0", up)
				if err := p.Start(); err != nil {
					n.errs = append(n.errs, fmt.Sprintf("starting a proxy to %s: %v", up, err))
					p = nil
				} else {
					via[up] = p.Listen
				}
			}
			proxies = append(proxies, p)
		}
		n.proxies, n.via = append(n.proxies, proxies), append(n.via, via)
	}
	return n
}

// env is env as process proc's clients reach it: through its proxies.
func (n *network) env(env *exploreEnv, proc int) *exploreEnv {
	i := slices.Index(n.procs, proc)
	if i < 0 {
		return env
	}
	e := *env
	e.via, e.strays, e.dials = n.via[i], &n.strays, &n.dials
	return &e
}

// dial is where a client reaches addr: its proxy, if it has one.
func (e *exploreEnv) dial(addr string) string {
	if via, ok := e.via[addr]; ok {
		return via
	}
	return addr
}

// links are the proxies f puts its toxic on: f.Node counts the run's
// server (on a cluster, node f.Target of them) and each Redlock master.
func (n *network) links(f netFault) []*toxiproxy.Proxy {
	var out []*toxiproxy.Proxy
	for i, proxies := range n.proxies {
		node := f.Node % (1 + len(proxies) - n.servers)
		if node == 0 {
			node = f.Target % n.servers
		} else {
			node += n.servers - 1
		}
		if p := proxies[node]; p != nil && (f.Proc >= len(n.procs) || f.Proc == i) {
			out = append(out, p)
		}
	}
	return out
}

// inject puts the schedule's toxics on at their times and takes each off
// after its while, on a goroutine of its own; wait returns once the last
// is off.
func (n *network) inject(ctx context.Context) {
	if len(n.faults) == 0 {
		return
	}
	go func() {
		defer close(n.done)
		start := time.Now()
		type on struct {
			links []*toxiproxy.Proxy
			off   time.Time
		}
		var active []on
		takeOff := func(until time.Time) {
			for len(active) > 0 && !active[0].off.After(until) {
				_ = sleepCtx(ctx, time.Until(active[0].off))
				for _, p := range active[0].links {
					_ = p.Toxics.RemoveToxic(context.Background(), "explore")
				}
				active = active[1:]
			}
		}
		for _, f := range n.faults {
			at := start.Add(f.At)
			takeOff(at)
			if sleepCtx(ctx, time.Until(at)) != nil {
				break
			}
			links := n.links(f)
			busy := slices.ContainsFunc(active, func(a on) bool {
				return slices.ContainsFunc(a.links, func(p *toxiproxy.Proxy) bool { return slices.Contains(links, p) })
			})
			if len(links) == 0 || busy {
				continue // a cluster node, or a link with a toxic on already
			}
			body, _ := json.Marshal(f.toxicFor())
			for _, p := range links {
				if _, err := p.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
					n.errs = append(n.errs, fmt.Sprintf("adding %s: %v", f.Toxic, err))
				}
			}
			n.count = append(n.count, "net."+f.Toxic)
			if n.cluster && f.Node%(1+len(n.proxies[0])-n.servers) == 0 {
				n.count = append(n.count, "net.cluster")
			}
			active = append(active, on{links, time.Now().Add(f.For)})
			slices.SortFunc(active, func(a, b on) int { return a.off.Compare(b.off) })
		}
		takeOff(time.Now().Add(time.Hour))
	}()
}

// wait returns once every toxic is off, and adds what was injected to out.
func (n *network) wait(out *outcome) {
	<-n.done
	for _, k := range n.count {
		out.injected[k]++
	}
	for _, e := range n.errs {
		out.violate("network: %s", e)
	}
	if k := n.dials.Load(); k > 0 {
		out.injected["net.cluster.dials"] += int(k)
	}
	if k := n.strays.Load(); k > 0 {
		out.violate("network: %d dials to a cluster node went around its proxy", k)
	}
}

// stop closes the proxies (and every connection through them).
func (n *network) stop() {
	for _, proxies := range n.proxies {
		for _, p := range proxies {
			if p != nil {
				p.Stop()
			}
		}
	}
}

// drawNetwork draws the network and eviction faults, added after every CI
// seed was chosen, from a stream of their own: under its key no seed of
// ciSeeds draws them (TestExplore_NewFaultsLeaveCISeedsAlone), and every
// other seed keeps everything else it drew. A network fault comes in a
// quarter of the runs that are not quiet, an eviction in a tenth of the
// standalone ones.
func (p *params) drawNetwork(seed uint64, quiet bool) {
	if quiet {
		return
	}
	rng := rand.New(rand.NewPCG(seed, netStreamKey))
	if rng.IntN(4) == 0 {
		p.Faults = append(p.Faults, "network")
	}
	if rng.IntN(10) == 0 && !p.Cluster {
		p.Faults = append(p.Faults, "evict")
	}
}

// netStreamKey keys drawNetwork's stream.
const netStreamKey = 0x6e65b4

var soakFaults = flag.String("explore.with", "", "soak: only seeds that draw one of these fault kinds, comma-separated")

// soakWants reports whether a soak runs p: every seed, or with
// -explore.with, only those that draw one of its fault kinds (a soak of
// the kinds a few seeds in ten draw).
func soakWants(p params) bool {
	return *soakFaults == "" || slices.ContainsFunc(strings.Split(*soakFaults, ","), p.has)
}

// Toxiproxy's toxics log to zerolog's global logger, not the server's: a
// bandwidth toxic writes a line to stdout for every connection it was on
// when removed, thousands in a soak.
func init() { log.Logger = zerolog.Nop() }
