//go:build faults

package faults

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"
)

// The migrate fault: on a cluster run, a lock's slot moves to another
// master and back while clients hold and contend, as redis-cli --cluster
// reshard moves it (redistest.Cluster.MigrateSlot): the target imports,
// the owner migrates, the keys move in batches with MIGRATE, and while
// the slot is split clients meet ASK redirections, and TRYAGAIN for a
// script whose keys are on both nodes; then every node is told the new
// owner. dlock promises nothing less there (docs/SAFETY.md): not labelled.

// migrateStream is the key of the stream migrations are drawn from: under
// it, no CI seed but crashSeed draws one (TestExplore_CrashesKeepTheCISchedules).
const migrateStream = 0x510b

// migrateRate: a migration comes in one cluster run in migrateRate.
const migrateRate = 3

// drawMigrate draws whether a cluster run migrates a slot, from a stream
// of its own, so every seed keeps the schedule it had without it.
func (p *params) drawMigrate(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, migrateStream))
	if rng.IntN(migrateRate) == 0 && p.Cluster {
		p.Faults = append(p.Faults, "migrate")
	}
}

// migration is one lock's slot moved away and back.
type migration struct {
	At    time.Duration // after the run's start
	Name  string        // the lock whose slot moves (with every key of that slot)
	Split time.Duration // how long the slot stays split between the nodes, after the first batch
	Back  time.Duration // how long it stays on the other node before it moves back
}

// drawMigrations picks the locks whose slots move, and when: one to three
// moves of the run's locks (not a Redlock's: its masters are no cluster),
// within the first seconds, while clients contend.
func drawMigrations(p params, names map[string][]string) []migration {
	if !p.has("migrate") || !p.Cluster { // a replay may ask for it on one server: nothing to move
		return nil
	}
	var candidates []string
	for _, k := range p.Kinds {
		if k != "redlock" {
			candidates = append(candidates, names[k]...)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(p.Seed, migrateStream+1))
	var out []migration
	at := time.Duration(0)
	for range 1 + rng.IntN(3) {
		at += time.Duration(50+rng.IntN(800)) * time.Millisecond
		out = append(out, migration{At: at, Name: candidates[rng.IntN(len(candidates))],
			Split: time.Duration(10+rng.IntN(300)) * time.Millisecond, Back: time.Duration(rng.IntN(1000)) * time.Millisecond})
	}
	return out
}

// migrateSlots runs the schedule's migrations, one after another. Each
// slot goes back to its owner, so the lane's cluster keeps the layout the
// next run counts on (nodeOfSlot). A migration that fails is a violation:
// the explorer could not make the fault, and a slot may be left half moved.
func migrateSlots(ctx context.Context, env *exploreEnv, s *schedule, out *outcome) {
	start := time.Now()
	for _, m := range s.migrations {
		if sleepCtx(ctx, time.Until(start.Add(m.At))) != nil {
			return
		}
		c := env.slots
		slot64, err := c.Nodes[0].Client().ClusterKeySlot(ctx, "{"+m.Name+"}").Result()
		if err != nil {
			out.violate("migrate: the slot of %s: %v", m.Name, err)
			return
		}
		slot := int(slot64)
		owner, err := c.SlotOwner(ctx, slot)
		if err != nil {
			out.violate("migrate: %v", err)
			return
		}
		split := func() { _ = sleepCtx(ctx, m.Split) }
		if err := c.MigrateSlot(ctx, slot, (owner+1)%len(c.Nodes), split); err != nil {
			out.violate("migrate: slot %d (%s) away: %v", slot, m.Name, err)
			return
		}
		out.injected["migrate"]++
		_ = sleepCtx(ctx, m.Back)
		// Back, whatever the run's context says: the lane's next runs need it.
		back, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = c.MigrateSlot(back, slot, owner, split)
		cancel()
		if err != nil {
			out.violate("migrate: slot %d (%s) back: %v", slot, m.Name, err)
			return
		}
		out.injected["migrate"]++
	}
}

// migratedNames are the locks whose slots a run moves.
func migratedNames(s *schedule) []string {
	var names []string
	for _, m := range s.migrations {
		if !slices.Contains(names, m.Name) {
			names = append(names, m.Name)
		}
	}
	return names
}
