//go:build faults

package faults

import (
	"encoding/binary"
	"io"
	"net"
	"time"
)

// The sleeping probe is woken by a timer, which the Go scheduler runs on
// the next schedule of the P that holds it, into that P's next slot. A
// goroutine woken by the network, as the one reading a renewal's reply
// is, comes out of the netpoller into a run queue, behind the other
// lanes' goroutines and the checkers': on a loaded soak it waited
// hundreds of ms while the sleeping probe woke a few ms late (renewals
// sent in time, answered 300-500 ms later, with the servers not waiting
// for a CPU). The network probe is woken the way a reply's reader is: a
// goroutine stamps the time on a loopback connection every probeTick,
// and one parked reading the other end counts the time from the stamp to
// its reading, more than probeSlack, as its process's stall. Not under
// the race detector: its scheduler takes the next slot only half the
// time and shuffles run queues, so the stamp may wait as long as its
// reader, and the reader may run at once (the explorer runs without it).

// startNetProbe logs into log the network probe's stalls, from now on;
// where loopback cannot be listened on it logs nothing.
func startNetProbe(log *stallLog) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		defer ln.Close()
		conn, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- conn
	}()
	writer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		_ = ln.Close()
		return
	}
	reader, ok := <-accepted
	if !ok {
		_ = writer.Close()
		return
	}
	// A stamp is the time since base, on the monotonic clock. The
	// stamping goroutine is woken by a timer, the reading one by the
	// network.
	base := time.Now()
	go func() {
		var stamp [8]byte
		for {
			time.Sleep(probeTick)
			binary.BigEndian.PutUint64(stamp[:], uint64(time.Since(base)))
			if _, err := writer.Write(stamp[:]); err != nil {
				return
			}
		}
	}()
	go func() {
		var stamp [8]byte
		var last time.Time
		for {
			if _, err := io.ReadFull(reader, stamp[:]); err != nil {
				return
			}
			sent := base.Add(time.Duration(binary.BigEndian.Uint64(stamp[:])))
			read := time.Now()
			if sent.Before(last) || sent.After(read) { // not our writer's
				continue
			}
			last = sent
			if read.Sub(sent) > probeSlack {
				log.add(sent, read)
			}
		}
	}()
}
