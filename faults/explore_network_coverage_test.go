//go:build faults

package faults

import (
	"slices"
	"testing"
)

// netCISeed is the one CI seed that draws the network and eviction faults
// (on a standalone server, a Redlock's masters proxied too); every other
// CI seed draws neither, and so kept its schedule when they were added.
const netCISeed = 5475

// TestExplore_NewFaultsLeaveCISeedsAlone: under drawNetwork's stream key,
// no CI seed but netCISeed draws the network or eviction fault; under
// drawFailover's, none draws a failover (a CI case runs one: its params
// are given, not drawn). And the failover's draw keeps to
// what it promises: standalone runs only, none with a fault whose node
// is the one server, about one in failoverRate of the rest.
func TestExplore_NewFaultsLeaveCISeedsAlone(t *testing.T) {
	for _, seed := range ciSeeds {
		p := randomParams(seed, maxClients())
		drew := p.has("network") || p.has("evict")
		if drew != (seed == netCISeed) {
			t.Errorf("seed %d draws network or evict: %v (%s)", seed, drew, p)
		}
		if p.has("failover") {
			t.Errorf("seed %d draws a failover: %s", seed, p)
		}
	}
	standalone, failovers := 0, 0
	for seed := uint64(1000); seed < 6000; seed++ {
		p := randomParams(seed, 16)
		if p.has("failover") && (p.Cluster || p.has("restart") || p.has("evict") || p.has("network")) {
			t.Errorf("seed %d: a failover with a fault of the one server, or on a cluster: %s", seed, p)
		}
		if !p.Cluster && !p.has("restart") && !p.has("evict") && !p.has("network") {
			standalone++
			if p.has("failover") {
				failovers++
			}
		}
	}
	if rate := float64(failovers) / float64(standalone); rate < 0.8/failoverRate || rate > 1.2/failoverRate {
		t.Errorf("%d failovers in %d standalone runs that may have one: %.3f, want about 1/%d", failovers, standalone, rate, failoverRate)
	}
	p := randomParams(netCISeed, maxClients())
	if p.Cluster || !slices.Contains(p.Kinds, "redlock") {
		t.Errorf("seed %d: want a standalone run with Redlocks, so that every proxied node is hit: %s", netCISeed, p)
	}
}
