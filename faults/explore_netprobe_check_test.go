//go:build faults && !race

package faults

import (
	"testing"
	"time"
)

// TestNetProbe_SeesGoroutinesTheNetworkWakesWait: with one P taken in
// turns by twenty goroutines that spin, a goroutine the network wakes
// waits about 200 ms to run; the network probe sees a stall of 50 ms at
// least. Not under the race detector, whose scheduler the probe does not
// measure (explore_netprobe_test.go); test.sh runs it in its explorer step.
func TestNetProbe_SeesGoroutinesTheNetworkWakesWait(t *testing.T) {
	net := &stallLog{}
	startNetProbe(net)
	began, ended := spinOneP(func() { time.Sleep(time.Second) })
	longest := awaitStall(net, began, ended, 50*time.Millisecond)
	t.Logf("spun for %v; the network probe's longest stall %v", ended.Sub(began).Round(time.Millisecond), longest)
	if longest < 50*time.Millisecond {
		t.Errorf("the network probe's longest stall %v, want 50 ms at least", longest)
	}
}
