//go:build faults

package faults

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestNetProbe_SeesGoroutinesTheNetworkWakesWait: with one P taken in
// turns by twenty goroutines that spin, a goroutine the network wakes
// waits about 200 ms to run; the network probe sees a stall of 50 ms at
// least.
func TestNetProbe_SeesGoroutinesTheNetworkWakesWait(t *testing.T) {
	net := &stallLog{}
	startNetProbe(net)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	began := time.Now()
	stop := make(chan struct{})
	var spinners sync.WaitGroup
	for range 20 {
		spinners.Add(1)
		go func() {
			defer spinners.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	time.Sleep(time.Second)
	close(stop)
	spinners.Wait()
	ended := time.Now()
	longest := func() (d time.Duration) {
		for _, s := range net.clipped(began, ended.Add(time.Second)) {
			d = max(d, s.to.Sub(s.from))
		}
		return d
	}
	deadline := time.Now().Add(5 * time.Second)
	for longest() < 50*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(probeTick)
	}
	t.Logf("spun for %v; the network probe's longest stall %v, %v in all", ended.Sub(began).Round(time.Millisecond), longest(), starvedFor(began, ended, net))
	if longest() < 50*time.Millisecond {
		t.Errorf("the network probe's longest stall %v, want 50 ms at least", longest())
	}
}
