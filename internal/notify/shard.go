package notify

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// shard is one subscriber connection and the channels it carries.
type shard struct {
	hub     *Hub
	addr    string
	sharded bool
	node    redis.UniversalClient // the client ps came from
	ps      *redis.PubSub

	// (S)SUBSCRIBE and (S)UNSUBSCRIBE on ps.
	subscribe, unsubscribe func(ctx context.Context, channels ...string) error

	mu      sync.Mutex
	topics  map[string]*topic
	retired bool // out of the hub and closed, its last channel gone: see drop

	// sendMu keeps (UN)SUBSCRIBE in the order decided under mu: taken
	// before mu is released, so an unsubscribe decided first is sent first.
	sendMu sync.Mutex
}

// topic is the state of one channel on a shard.
type topic struct {
	waiters map[string]*Waiter // by id

	wanted  bool // a SUBSCRIBE is the last command sent for this channel
	pending int  // commands sent whose confirmation has not arrived yet

	ready chan struct{} // closed once confirmed, or given up: Watch returns
	idle  *time.Timer   // unsubscribes once it had no waiter for Linger
}

// add registers a new waiter on channel, subscribing when it is the first,
// and returns a channel closed once the subscription is confirmed or given
// up. A retired shard takes no waiter (nil): ask the hub again.
func (sh *shard) add(channel string) (*Waiter, <-chan struct{}) {
	w := &Waiter{id: newWaiterID(), shard: sh, channel: channel, wake: make(chan struct{}, 1)}
	sh.mu.Lock()
	if sh.retired {
		sh.mu.Unlock()
		return nil, nil
	}
	tp := sh.topics[channel]
	if tp == nil {
		tp = &topic{waiters: make(map[string]*Waiter)}
		sh.topics[channel] = tp
	}
	w.topic = tp
	tp.waiters[w.id] = w
	tp.stopIdle()
	if tp.wanted {
		ready := tp.ready
		sh.mu.Unlock()
		return w, ready
	}
	tp.wanted, tp.ready = true, make(chan struct{})
	tp.pending++
	ready := tp.ready
	sh.send(sh.subscribe, channel)
	return w, ready
}

// isSubscribed reports whether channel's subscription is confirmed, not given up.
func (sh *shard) isSubscribed(channel string) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tp := sh.topics[channel]
	return tp != nil && tp.wanted && tp.pending == 0
}

// remove takes w off its channel; the last waiter to go leaves the channel
// subscribed for the hub's Linger time.
func (sh *shard) remove(w *Waiter) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tp := w.topic
	delete(tp.waiters, w.id)
	switch {
	case len(tp.waiters) > 0:
	case tp.wanted:
		channel, timer := w.channel, (*time.Timer)(nil)
		timer = time.AfterFunc(sh.hub.cfg.Linger, func() {
			sh.mu.Lock() // before reading timer, set under it
			sh.unsubscribeIdle(channel, tp, timer)
		})
		tp.idle = timer
	case tp.pending == 0:
		sh.drop(w.channel)
	}
}

// unsubscribeIdle drops channel's subscription if it is still unused and
// timer still its linger timer: one stopped after it fired is stale.
// Called with sh.mu held, it releases it.
func (sh *shard) unsubscribeIdle(channel string, tp *topic, timer *time.Timer) {
	if sh.topics[channel] != tp || len(tp.waiters) > 0 || !tp.wanted || tp.idle != timer {
		sh.mu.Unlock()
		return
	}
	tp.idle, tp.wanted = nil, false
	tp.pending++
	sh.send(sh.unsubscribe, channel)
}

// send sends op (sh.subscribe or sh.unsubscribe) on the hub's context, so
// no waiter's cancellation cuts the shared connection. Called with sh.mu
// held, it releases it once sendMu keeps the order decided under it.
func (sh *shard) send(op func(ctx context.Context, channels ...string) error, channel string) {
	sh.sendMu.Lock()
	sh.mu.Unlock()
	ctx, cancel := context.WithTimeout(sh.hub.ctx, subscribeTimeout)
	err := op(ctx, channel)
	cancel()
	sh.sendMu.Unlock()
	if err != nil {
		// Its waiters go on without wake-ups; the next to come subscribes afresh.
		sh.hub.cfg.Logger.Debug("dlock: subscription failed", "channel", channel, "err", err)
		sh.mu.Lock()
		sh.reset(channel)
		sh.mu.Unlock()
	}
}

// reset forgets what was sent for channel, if known, releases its waiters
// from Watch and wakes them: what was published meanwhile may have been lost.
func (sh *shard) reset(channel string) {
	tp := sh.topics[channel]
	if tp == nil {
		return
	}
	tp.wanted, tp.pending = false, 0
	tp.stopIdle()
	tp.markReady()
	tp.wakeAll()
	if len(tp.waiters) == 0 {
		sh.drop(channel)
	}
}

// read dispatches what the subscriber connection receives until the hub closes.
func (sh *shard) read() {
	failures := 0
	for {
		msg, err := sh.ps.Receive(sh.hub.ctx)
		if err != nil {
			if sh.hub.ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			sh.failed(err)
			sh.dropMoved()
			// go-redis reconnects and resubscribes on the next Receive; do
			// not spin while the server is away.
			failures++
			select {
			case <-time.After(min(10*time.Millisecond<<min(failures, 6), time.Second)):
			case <-sh.hub.ctx.Done():
				return
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Message:
			sh.deliver(m.Channel, m.Payload)
		case *redis.Subscription:
			if sh.confirmed(m) {
				sh.dropMoved()
			}
		}
	}
}

// failed handles a broken connection or an error reply, which answers a
// pending command (NOPERM, MOVED…): those channels will not be confirmed.
// Either way messages may have been lost, so every waiter retries.
func (sh *shard) failed(err error) {
	sh.hub.cfg.Logger.Debug("dlock: subscriber error", "addr", sh.addr, "err", err)
	_, serverReply := errors.AsType[redis.Error](err)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	refused := serverReply && strings.HasPrefix(err.Error(), "NOPERM")
	for channel, tp := range sh.topics {
		if serverReply && tp.pending > 0 {
			if refused { // the reply names no channel: each pending one's waiters are told
				for _, w := range tp.waiters {
					w.mu.Lock()
					w.refused = err
					w.mu.Unlock()
				}
			}
			sh.reset(channel)
			continue
		}
		tp.wakeAll()
	}
}

func (sh *shard) deliver(channel, payload string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tp := sh.topics[channel]
	if tp == nil {
		return
	}
	if payload == WakeAll {
		tp.wakeAll()
		return
	}
	id, grant, _ := strings.Cut(payload, ":")
	if w := tp.waiters[id]; w != nil {
		if grant != "" { // kept until read: a bare wake-up after it does not erase it
			w.mu.Lock()
			w.grant = grant
			w.mu.Unlock()
		}
		w.notify()
	}
}

// confirmed handles a subscription's confirmation; resubscribed: it was
// go-redis's own after a reconnect, when the node may have changed roles.
func (sh *shard) confirmed(m *redis.Subscription) (resubscribed bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tp := sh.topics[m.Channel]
	if tp == nil {
		return false
	}
	if tp.pending == 0 {
		// Not ours: go-redis resubscribed after a reconnect, or the server
		// dropped the channel; messages may have been lost.
		if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
			tp.wakeAll()
			return true
		} else if tp.wanted {
			sh.reset(m.Channel)
		}
		return false
	}
	tp.pending--
	switch {
	case tp.pending > 0:
	case tp.wanted:
		tp.markReady()
	case len(tp.waiters) == 0:
		sh.drop(m.Channel)
	}
	return false
}

// dropMoved gives up the channels whose slot this sharded shard's node no
// longer serves (all, once it is a replica). Their waiters are woken
// unsubscribed and watch again where the channel is now.
func (sh *shard) dropMoved() {
	cluster, ok := sh.hub.cfg.Client.(*redis.ClusterClient)
	if !sh.sharded || !ok {
		return
	}
	cluster.ReloadState(sh.hub.ctx) // read on a later call: this one may see the old layout
	ctx, cancel := context.WithTimeout(sh.hub.ctx, subscribeTimeout)
	role, err := sh.node.Do(ctx, "ROLE").Slice() // where ROLE is refused (ACL), the layout decides
	cancel()
	demoted := err == nil && len(role) > 0 && role[0] != "master"
	sh.mu.Lock()
	channels := slices.Collect(maps.Keys(sh.topics))
	sh.mu.Unlock()
	for _, channel := range channels {
		if !demoted {
			node, err := cluster.MasterForKey(sh.hub.ctx, channel)
			if err != nil || node.Options().Addr == sh.addr {
				continue
			}
		}
		sh.mu.Lock()
		sh.reset(channel)
		sh.mu.Unlock()
	}
}

// drop forgets channel, which has no waiter and no command outstanding.
// The last channel takes the shard out of the hub and closes its
// connection, ending its goroutine: a node that left the cluster keeps no
// subscriber reconnecting to it, and an idle process keeps no connection.
// Called with sh.mu held; it takes the hub's lock.
func (sh *shard) drop(channel string) {
	delete(sh.topics, channel)
	if len(sh.topics) > 0 || sh.retired {
		return
	}
	sh.retired = true
	h := sh.hub
	h.mu.Lock()
	if h.shards[sh.addr] == sh {
		delete(h.shards, sh.addr)
	}
	h.mu.Unlock()
	// No command can be in flight: none is without its channel here. The
	// reader's Receive returns ErrClosed, on which it ends.
	_ = sh.ps.Close()
}

// stopIdle keeps the channel subscribed past its Linger time.
func (tp *topic) stopIdle() {
	if tp.idle != nil {
		tp.idle.Stop()
		tp.idle = nil
	}
}

func (tp *topic) markReady() {
	select {
	case <-tp.ready:
	default:
		close(tp.ready)
	}
}

func (tp *topic) wakeAll() {
	for _, w := range tp.waiters {
		w.notify()
	}
}

// notify wakes w; a wake-up already pending stands for this one too.
func (w *Waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
