//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/clock"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/internal/scripts"
)

// commandFaults is the go-redis hook of one explored client: on real
// traffic, it delays a script call, loses its reply after the server
// applied it, sends a copy again later on another connection, or drops it
// before it is sent; and it freezes the whole client for a while, as a
// stopped process would be. Draws come from the client's own stream of the
// schedule's seed, in the order that client sends.
type commandFaults struct {
	kinds    map[string]bool
	withhold bool                  // keep every renewal from Redis, silently (explore_mutate_test.go)
	resend   redis.UniversalClient // another connection, for late copies
	late     sync.WaitGroup        // late copies still to arrive
	stop     chan struct{}         // closed when the run ends: no more faults

	mu          sync.Mutex
	rng         *rand.Rand
	frozenUntil time.Time
	injected    map[string]int
	doubtful    map[string]bool      // lock names whose release or abandon a fault hit
	lateOwners  map[string]bool      // owners of acquires a copy of was sent late (sendLate)
	cleaning    atomic.Int64         // clean-ups in flight (waitCleanUps)
	orphaned    []orphanedCopy       // late copies that took a lock for a call that gave up
	voided      map[string]time.Time // when each call's abandon came back, by its tombstone's key
	dead        bool                 // its process was killed: nothing more of it is sent (explore_crash_test.go)
	failover    *failoverEnv         // the run's failovers, on a process's own hook; nil elsewhere
	cfail       *clusterFailovers    // the run's cluster failovers, likewise
	clock       *clock.Clock         // its process's, in a suspend run: nothing is sent, and no reply read, while it is suspended
	onReply     func([]redis.Cmder)  // told each reply before the caller reads it (a suspension may begin); nil: none
	slow        *stallLog            // its commands' slow round trips (explore_starve_test.go)
	copying     map[string]int       // late copies on their way, by their call's tombstone (sendLate)
	// latefirst (explore_latefirst_test.go): firstRng picks the echoes it
	// turns into latefirst (nil: none), firsts are the first copies held
	// for their calls' waits, by tombstone, leftBehind what its check found
	firstRng *rand.Rand
	// unreachable: while it says so, every script call is dropped (a
	// rlfailover run's Redlock master 2, explore_rlfailover_test.go)
	unreachable *atomic.Bool
	firsts      map[string]*lateFirst
	leftBehind  []string
}

// tombstoneOf is the tombstone key among a script call's arguments.
func tombstoneOf(args []any) string {
	if len(args) < 3 {
		return ""
	}
	for _, a := range args[2:] {
		if k := argString(a); strings.Contains(k, ":void:") {
			return k
		}
	}
	return ""
}

// abandonSHAs: the scripts with which a call gives up.
var abandonSHAs = scriptIDs(family.ScriptSet(abandonOf)...)

func abandonOf(s family.Scripts) *redis.Script { return s.Abandon }

// orphanedCopy is a late copy of an acquire that was granted after its
// call gave up: an orphan, unless a fault also hit the call's abandon.
type orphanedCopy struct {
	names  []string
	reply  string
	voided time.Time // when the call's abandon came back
}

// lockNames are the locks a command's keys belong to (their hash tags).
func lockNames(args []any) []string {
	var names []string
	for _, a := range args[2:] {
		for _, m := range hashTag.FindAllStringSubmatch(argString(a), -1) {
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
	}
	return names
}

// faultRate is the chance that a script call meets a given fault kind.
const faultRate = 20

// lateAcquireRate is the chance (1 in it) that an acquire meets a late
// copy, in a run with late copies: the coincidences a late copy needs to
// matter (its call gone, or still waiting on a lock that frees) are rare,
// so acquires meet it more often than other script calls.
const lateAcquireRate = 4

// readTimeout is the explored clients' read timeout: go-redis resends a
// command only once it has waited that long for its reply, and dlock counts
// on that (Client.resendAfter).
const readTimeout = time.Second

func newCommandFaults(seed uint64, client int, kinds []string, resend redis.UniversalClient) *commandFaults {
	f := &commandFaults{kinds: map[string]bool{}, resend: resend, stop: make(chan struct{}),
		rng: rand.New(rand.NewPCG(seed, uint64(client)+100)), injected: map[string]int{}, doubtful: map[string]bool{}, lateOwners: map[string]bool{}, voided: map[string]time.Time{}, slow: &stallLog{},
		copying: map[string]int{}, firsts: map[string]*lateFirst{}}
	for _, k := range kinds {
		f.kinds[k] = true
	}
	return f
}

// errLostReply is what a caller sees of a command whose reply was lost.
var errLostReply = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// draw picks the fault a script call meets, if any. An acquire meets a
// late copy more often (lateAcquireRate), two times in three as an echo: the
// caller gets the reply to go-redis's resent copy, after a read timeout,
// and the first copy arrives later, while the call may still wait.
func (f *commandFaults) draw(acquire bool) (kind string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.stop:
		return "", 0
	default:
	}
	if acquire && f.kinds["late"] && f.rng.IntN(lateAcquireRate) == 0 {
		kind = "echo"
		if f.rng.IntN(3) == 0 {
			kind = "late"
		}
		f.injected[kind]++
		return kind, time.Duration(10+f.rng.IntN(400)) * time.Millisecond
	}
	for _, k := range []string{"delay", "lost", "late", "retry", "drop"} {
		if f.kinds[k] && f.rng.IntN(faultRate) == 0 {
			f.injected[k]++
			return k, time.Duration(10+f.rng.IntN(400)) * time.Millisecond
		}
	}
	return "", 0
}

// freeze stops every command of the client for d from now.
func (f *commandFaults) freeze(d time.Duration) {
	f.holdBack(d)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.injected["freeze"]++
}

// holdBack is freeze on another connection of a frozen process: counted
// once, by the freeze.
func (f *commandFaults) holdBack(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozenUntil = time.Now().Add(d)
}

// replied is the hook's last step, before the caller reads the replies:
// a suspension may begin there, and a suspended process reads them once
// it resumes (explore_suspend_test.go).
func (f *commandFaults) replied(cmds []redis.Cmder) {
	if f.onReply != nil {
		f.onReply(cmds)
	}
	f.clock.Wait()
}

// waitResumed holds a command of a suspended process until it resumes
// (explore_suspend_test.go), or its context ends.
func (f *commandFaults) waitResumed(ctx context.Context) error {
	if resumed := f.clock.Resumed(); resumed != nil {
		select {
		case <-resumed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (f *commandFaults) waitThaw(ctx context.Context) error {
	f.mu.Lock()
	until := f.frozenUntil
	f.mu.Unlock()
	return sleepCtx(ctx, time.Until(until))
}

func (f *commandFaults) process(ctx context.Context, cmds []redis.Cmder, next func(context.Context) error) (err error) {
	if f.isDead() {
		return setErr(cmds, errKilled)
	}
	if err := f.waitResumed(ctx); err != nil {
		return err
	}
	if err := f.waitThaw(ctx); err != nil {
		return err
	}
	if !anyScript(cmds) {
		return next(ctx)
	}
	if f.withhold && anyRenewal(cmds) { // the checker checked (explore_mutate_test.go): no fault
		return setErr(cmds, errLostReply)
	}
	if (f.failover != nil || f.cfail != nil) && anyCleanUp(cmds) {
		// A clean-up that met no master, the old one dead and the new one
		// not yet promoted (or, on a cluster, one that failed while its
		// shard failed over), left what it was to clean up: a waiter's
		// place, handed the lock by the next release, holds it for its
		// remainder, as a dead waiter's does (fair.go).
		called := time.Now()
		defer func() {
			if err != nil && (f.failover.mayHaveFailed(called, time.Now()) || f.cfail.mayHaveFailed(called, time.Now())) {
				f.doubt(cmds)
			}
		}()
	}
	if f.unreachable != nil && f.unreachable.Load() {
		f.doubt(cmds)
		return setErr(cmds, errLostReply)
	}
	first := f.landFirst(cmds) // its call's held first copy, landed now
	kind, d := f.draw(anyAcquire(cmds))
	if f.becomesLateFirst(ctx, cmds, kind) {
		kind = "latefirst"
	}
	defer func() {
		f.noteAbandons(cmds, err)
		f.doubtFailedCleanUps(cmds, err)
		f.checkWithdrawn(first, cmds, err)
		f.answered(cmds)
	}()
	switch kind {
	case "latefirst":
		return f.holdFirst(ctx, cmds, next)
	case "echo":
		return f.echo(ctx, cmds, d, next)
	case "delay":
		if err := sleepCtx(ctx, d); err != nil {
			return err
		}
	case "drop":
		f.doubt(cmds)
		return setErr(cmds, errLostReply)
	case "retry":
		// go-redis's own retry after a read timeout: the command was
		// applied, its reply lost, and the caller gets the reply to a copy
		// sent again on another connection.
		if err := next(ctx); err != nil {
			return err
		}
		return f.replyFromCopy(ctx, cmds)
	case "lost", "late":
		f.doubt(cmds)
		if err := next(ctx); err != nil {
			return err
		}
		if kind == "late" {
			f.sendLate(cmds, d)
		}
		return setErr(cmds, errLostReply)
	}
	return next(ctx)
}

// noteAbandons records when the abandons among cmds came back applied.
// err is what the hook returns: a command on its own has no error of its
// own yet when its hook returns (go-redis sets it after), and an abandon
// that failed (NOSCRIPT on a cold server, before dlock loads the script
// and sends it again) has not given the call up.
func (f *commandFaults) noteAbandons(cmds []redis.Cmder, err error) {
	for _, c := range cmds {
		args := c.Args()
		if len(args) < 2 || !abandonSHAs[argString(args[1])] || c.Err() != nil || (len(cmds) == 1 && err != nil) {
			continue
		}
		if k := tombstoneOf(args); k != "" {
			f.mu.Lock()
			if _, seen := f.voided[k]; !seen {
				f.voided[k] = time.Now()
			}
			f.mu.Unlock()
		}
	}
}

// doubtFailedCleanUps marks the locks of the clean-ups among cmds that
// came back with an error: whether the server applied them is unknown, and
// dlock returns the error (Unlock's ErrUnavailable for a TRYAGAIN while
// the slot is split mid-migration, issue 17's soak seed
// 1795696030340724105); a hold left so lasts its TTL, as documented. err
// is what the hook returns, a command alone's error (see noteAbandons).
// A missing script (NOSCRIPT, "Function not found") is no such error:
// dlock loads the script and sends the call again.
func (f *commandFaults) doubtFailedCleanUps(cmds []redis.Cmder, err error) {
	for _, c := range cmds {
		failed := c.Err()
		if len(cmds) == 1 {
			failed = err
		}
		if args := c.Args(); failed != nil && !missingScript(failed) && len(args) > 1 && cleanUpSHAs[argString(args[1])] {
			f.doubt([]redis.Cmder{c})
		}
	}
}

// echo is go-redis's retry seen whole: the first copy of cmds is held up
// on the network, the caller's read times out (readTimeout), and the copy
// go-redis sends again is applied and answers the caller. The first copy
// arrives later on another connection: for a waiting Lock (a call with a
// deadline of its own), shortly before that deadline, when the lock may
// have freed while the call waits for a wake-up or its next refresh, so
// that only the call's give-up can give a grant back; otherwise shortly
// before or after the resend.
func (f *commandFaults) echo(ctx context.Context, cmds []redis.Cmder, d time.Duration, next func(context.Context) error) error {
	hold := readTimeout + 5*time.Millisecond
	ms := d / time.Millisecond
	at := hold - d/8 // before the resend
	if ms%2 == 1 {
		at = hold + ms%30*time.Millisecond // after it
	}
	// Only a call's own wait (3 s at most), not the run's deadline.
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 4*time.Second {
		if before := time.Until(dl) - (10+ms%40)*time.Millisecond; before > at {
			at = before
		}
	}
	f.sendLate(cmds, at)
	if err := sleepCtx(ctx, hold); err != nil {
		return err // no resend: the first copy alone may be applied
	}
	return next(ctx)
}

// cleanUpSHAs: the scripts with which a call gives up or a holder lets go.
var cleanUpSHAs = scriptIDs(append(family.ScriptSet(abandonOf),
	family.ScriptSet(func(s family.Scripts) *redis.Script { return s.Release })...)...)

// renewalSHAs: the scripts that renew a hold (and extend it, for Extend).
var renewalSHAs = scriptIDs(family.ScriptSet(func(s family.Scripts) *redis.Script { return s.Extend })...)

func anyRenewal(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if args := c.Args(); len(args) > 1 && renewalSHAs[argString(args[1])] {
			return true
		}
	}
	return false
}

func anyCleanUp(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if args := c.Args(); len(args) > 1 && cleanUpSHAs[argString(args[1])] {
			return true
		}
	}
	return false
}

func anyAcquire(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if args := c.Args(); len(args) > 1 && acquireSHAs[argString(args[1])] {
			return true
		}
	}
	return false
}

// sendLate sends copies of cmds again after d on another connection, as
// go-redis's retry after a read timeout would.
func (f *commandFaults) sendLate(cmds []redis.Cmder, d time.Duration) {
	copies := make([][]any, len(cmds))
	f.mu.Lock()
	for i, c := range cmds {
		copies[i] = append([]any(nil), c.Args()...)
		if owner := acquireOwner(copies[i]); owner != "" {
			f.lateOwners[owner] = true
		}
		f.copying[tombstoneOf(copies[i])]++
	}
	f.mu.Unlock()
	f.late.Add(1)
	go func() {
		defer f.late.Done()
		defer func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, args := range copies {
				f.copying[tombstoneOf(args)]--
			}
		}()
		select {
		case <-time.After(d):
		case <-f.stop:
			return
		}
		f.clock.Wait()  // and wait for it while it is suspended
		if f.isDead() { // go-redis's resends die with its process
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, args := range copies {
			sent := time.Now()
			reply, err := scripts.AcquireReply(f.resend.Do(ctx, args...))
			// The caller was told the attempt failed, and gave up (a lost
			// reply is no transient error): a copy that takes the lock
			// now takes it for nobody.
			if err == nil && len(args) > 1 && acquireSHAs[argString(args[1])] && len(reply) > 0 && reply[0] == 1 {
				f.mu.Lock()
				// Only once the call's abandon has left its tombstone: one
				// still on its way (a delay) takes the copy's hold back.
				if voided, ok := f.voided[tombstoneOf(args)]; ok && voided.Before(sent) {
					f.orphaned = append(f.orphaned, orphanedCopy{names: lockNames(args), reply: fmt.Sprint(reply), voided: voided})
				}
				f.mu.Unlock()
			}
		}
	}()
}

// acquireOwner is the owner token an acquire's arguments ask for; "" for
// any other command.
func acquireOwner(args []any) string {
	if len(args) < 3 || !acquireSHAs[argString(args[1])] {
		return ""
	}
	return argString(scripts.Arg(args, "OWNER"))
}

// replyFromCopy sends cmds again and gives each the copy's reply.
func (f *commandFaults) replyFromCopy(ctx context.Context, cmds []redis.Cmder) error {
	var first error
	for _, c := range cmds {
		v, err := f.resend.Do(ctx, c.Args()...).Result()
		cmd, ok := c.(*redis.Cmd)
		switch {
		case err != nil:
			c.SetErr(err)
		case ok:
			cmd.SetErr(nil)
			cmd.SetVal(v)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// doubt marks the locks of cmds whose clean-up a fault may have undone: a
// hold of theirs may outlive the run by its TTL, as documented.
func (f *commandFaults) doubt(cmds []redis.Cmder) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cmds {
		args := c.Args()
		if len(args) < 2 || acquireSHAs[argString(args[1])] {
			continue
		}
		for _, name := range lockNames(args) {
			f.doubtful[name] = true
		}
	}
}

var hashTag = regexp.MustCompile(`\{([^}]+)\}`)

// acquireSHAs: the scripts whose loss is no clean-up's. A lost acquire is
// followed by the caller's abandon, which must leave nothing behind.
var acquireSHAs = scriptIDs(family.ScriptSet(func(s family.Scripts) *redis.Script { return s.Acquire })...)

// scriptIDs are the names a command calls each of ss by: its function
// (FCALL) and its SHA (EVALSHA, where Functions are refused).
func scriptIDs(ss ...*redis.Script) map[string]bool {
	ids := make(map[string]bool, 2*len(ss))
	for _, s := range ss {
		ids[scripts.Function(s)], ids[s.Hash()] = true, true
	}
	return ids
}

// missingScript is the reply of a server without the script called
// (NOSCRIPT, "Function not found"): it ran nothing, and dlock loads the
// script and sends the call again.
func missingScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT") || err != nil && strings.Contains(err.Error(), "Function not found")
}

func anyScript(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "fcall", "evalsha", "eval":
			return true
		}
	}
	return false
}

func argString(a any) string {
	s, _ := a.(string)
	return s
}

func setErr(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		c.SetErr(err)
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *commandFaults) DialHook(next redis.DialHook) redis.DialHook { return next }

// inFlight counts cmds as a clean-up in flight, if they carry one, until
// the func it returns is called (see waitCleanUps).
func (f *commandFaults) inFlight(cmds []redis.Cmder) func() {
	if !anyCleanUp(cmds) {
		return func() {}
	}
	f.cleaning.Add(1)
	return func() { f.cleaning.Add(-1) }
}

func (f *commandFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer f.inFlight([]redis.Cmder{cmd})()
		err := f.process(ctx, []redis.Cmder{cmd}, func(ctx context.Context) error {
			sent := time.Now()
			err := next(ctx, cmd)
			f.slow.roundTrip(sent, err)
			return err
		})
		f.replied([]redis.Cmder{cmd})
		return err
	}
}

func (f *commandFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer f.inFlight(cmds)()
		err := f.process(ctx, cmds, func(ctx context.Context) error {
			sent := time.Now()
			err := next(ctx, cmds)
			f.slow.roundTrip(sent, err)
			return err
		})
		f.replied(cmds)
		return err
	}
}
