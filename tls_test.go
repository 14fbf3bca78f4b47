package dlock_test

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

func TestTLS_LocksOverTLSWithAPassword_WrongCAOrPasswordFailsFast(t *testing.T) {
	t.Parallel()
	srv, certs := redistest.StartTLS(t)
	ctx := ctxFor(t, time.Minute)
	name := lockName(t)

	// Right CA and password: a lock, and a waiter woken over TLS pub/sub.
	holder, err := newClient(t, srv.Client()).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newClient(t, srv.Client(), dlock.WithWaiterRefresh(time.Hour))
	registered := countAttempts(waiter).registeredReach(1)
	waiting := lockInBackground(ctx, waiter.Mutex(name).Lock)
	waitDone(t, registered, time.Minute, "the waiter registering")
	if info, err := newClient(t, srv.Client()).Describe(ctx, name); err != nil || info.WritersWaiting != 1 {
		t.Fatalf("a registered waiter: %+v, %v", info, err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expectAcquired(t, waiting, 20*time.Second, "the waiter was not woken over TLS")

	for what, opts := range map[string]*redis.Options{
		"a CA that did not sign the server's certificate": {Addr: srv.Addr(), Password: certs.Password,
			TLSConfig: &tls.Config{ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}},
		"a wrong password": {Addr: srv.Addr(), Password: "wrong", TLSConfig: certs.ClientConfig()},
		"no TLS":           {Addr: srv.Addr(), Password: certs.Password, DialTimeout: time.Second, ReadTimeout: time.Second},
	} {
		opts.MaxRetries = -1
		rdb := redis.NewClient(opts)
		began := time.Now()
		_, err := newClient(t, rdb).Mutex(name).TryLock(ctx)
		_ = rdb.Close()
		if err == nil || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: %v; want a connection error, not ErrNotAcquired", what, err)
		}
		// A margin for a loaded machine; the point is not waiting for a TTL.
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("%s: failed after %v", what, took)
		}
		t.Logf("%s: %v", what, err)
	}
}
