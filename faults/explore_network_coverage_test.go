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
// no CI seed but netCISeed draws the network or eviction fault.
func TestExplore_NewFaultsLeaveCISeedsAlone(t *testing.T) {
	for _, seed := range ciSeeds {
		p := randomParams(seed, maxClients())
		drew := p.has("network") || p.has("evict")
		if drew != (seed == netCISeed) {
			t.Errorf("seed %d draws network or evict: %v (%s)", seed, drew, p)
		}
	}
	p := randomParams(netCISeed, maxClients())
	if p.Cluster || !slices.Contains(p.Kinds, "redlock") {
		t.Errorf("seed %d: want a standalone run with Redlocks, so that every proxied node is hit: %s", netCISeed, p)
	}
}
