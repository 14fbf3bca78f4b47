package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/family"
	"github.com/dlockio/dlock/observe"
)

const statusUsage = `Usage: dlock status [--json] NAME

Shows the lock NAME: its state, its type, who holds it (owner id hashes and hold
counts; a Mutex's owner is a secret and stays hidden; the host, pid and
program that a dlock run or a program's WithHolderInfo stored), how long
its holds last unless renewed (a live holder renews them every TTL/3), how
many wait for it (writers and readers of an RWMutex; Redis keeps no names
of waiters), and the last fencing token handed out.

The state is free; held (by a Mutex's holder or an RWMutex's writer: no one
else gets in); shared (by readers, or by some of a Semaphore's permits: more
may join); or full (every permit of a Semaphore held). The type is what the
lock's keys say: Election (with its leader's value), FairMutex (while some
wait in its queue), Mutex (also a FairMutex with nobody queued, and a
MultiLock's part), RWMutex (also a ReentrantMutex's) or Semaphore.

Examples:
  dlock status deploy:web
  dlock status --json nightly-report | jq -r .state
`

const unlockUsage = `Usage: dlock unlock --force [--yes] NAME

Removes the lock NAME whatever holds it, and wakes its waiters: the escape
hatch for a lock whose holder is known to be gone. The holders' leases see the
loss at their next renewal (a dlock run then stops its command); until then
they may still act as holders, which fencing tokens guard against. The fencing
counter is kept. Asks for confirmation unless --yes is given.

Examples:
  dlock unlock --force deploy:web
  dlock unlock --force --yes nightly-report
`

// statusJSON is what status --json prints.
type statusJSON struct {
	Name           string       `json:"name"`
	State          string       `json:"state"`          // "free", "held", "shared" or "full": see stateOf
	Type           string       `json:"type,omitempty"` // typeName's: "Mutex", "FairMutex", "Election", "RWMutex", "ReentrantMutex" or "Semaphore"; none when free
	Held           bool         `json:"held"`
	Holders        []holderJSON `json:"holders"`
	TTLMillis      int64        `json:"ttl_ms"` // -1: no expiry; 0: not held
	WritersWaiting int          `json:"writers_waiting"`
	ReadersWaiting int          `json:"readers_waiting"`
	LastToken      uint64       `json:"last_token"`
	Permits        int          `json:"permits,omitempty"`      // a Semaphore's
	LeaderValue    string       `json:"leader_value,omitempty"` // an Election's leader's
}

type holderJSON struct {
	Owner string            `json:"owner"` // "" for a Mutex
	Mode  string            `json:"mode"`  // "write", "read" or "permit"
	Holds int               `json:"holds"`
	Info  *admin.HolderInfo `json:"info,omitempty"` // who holds it, as stored by dlock run or WithHolderInfo
}

func defineStatus(fs *flag.FlagSet) action {
	redisFlag := fs.String("redis", "", redisFlagUsage)
	asJSON := fs.Bool("json", false, "print JSON, for scripts")
	return func(ctx context.Context, fs *flag.FlagSet, out *output) int {
		if fs.NArg() != 1 {
			return usageError(out, "status", "want one lock NAME")
		}
		return status(ctx, fs.Arg(0), *redisFlag, *asJSON, out)
	}
}

// status prints the state of the lock name.
func status(ctx context.Context, name, redisFlag string, asJSON bool, out *output) int {
	client, done, code := openLocks(ctx, "status", redisFlag, out)
	if client == nil {
		return code
	}
	defer done()
	info, err := client.Describe(ctx, name)
	if err != nil {
		return reportError("status", err, out)
	}
	s := statusOf(info)
	if asJSON {
		writeJSON(out.stdout, s)
		return 0
	}
	fmt.Fprintf(out.stdout, "name:        %s\n", printable(s.Name))
	fmt.Fprintf(out.stdout, "state:       %s\n", s.State)
	if s.Held {
		fmt.Fprintf(out.stdout, "type:        %s\n", typeLabel(s.Type))
		if info.Kind == observe.KindElection {
			fmt.Fprintf(out.stdout, "leader:      %s\n", s.LeaderValue)
		}
		if s.Permits > 0 {
			fmt.Fprintf(out.stdout, "permits:     %d of %d held\n", permitsHeld(info), s.Permits)
		}
		for i, h := range s.Holders {
			if s.Permits > 0 && h.Info == nil {
				continue // counted in the permits line
			}
			label := "holders:"
			if i > 0 {
				label = ""
			}
			owner := printable(h.Owner)
			if owner == "" {
				owner = "(owner token hidden)"
			}
			fmt.Fprintf(out.stdout, "%-12s %s  %s ×%d\n", label, owner, h.Mode, h.Holds)
			if h.Info != nil {
				fmt.Fprintf(out.stdout, "%-12s %s\n", "", holderInfoLine(*h.Info))
			}
		}
		ttl := "never (no expiry)"
		if info.TTL >= 0 {
			ttl = fmt.Sprintf("in %v unless renewed (a live holder renews it)", info.TTL.Round(100*time.Millisecond))
		}
		fmt.Fprintf(out.stdout, "expires:     %s\n", ttl)
	}
	if s.Type == "RWMutex" || s.Type == "ReentrantMutex" {
		fmt.Fprintf(out.stdout, "waiting:     %s, %s\n", plural(s.WritersWaiting, "writer"), plural(s.ReadersWaiting, "reader"))
	} else {
		fmt.Fprintf(out.stdout, "waiting:     %d\n", s.WritersWaiting+s.ReadersWaiting)
	}
	fmt.Fprintf(out.stdout, "last token:  %d\n", s.LastToken)
	return 0
}

// statusOf is what status --json says of a lock, and ls --json of each.
func statusOf(info admin.LockInfo) statusJSON {
	s := statusJSON{Name: info.Name, State: stateOf(info), Type: typeName(info.Kind), Held: len(info.Holders) > 0, Holders: []holderJSON{},
		TTLMillis: info.TTL.Milliseconds(), WritersWaiting: info.WritersWaiting,
		ReadersWaiting: info.ReadersWaiting, LastToken: info.LastToken, Permits: info.Permits, LeaderValue: info.LeaderValue}
	if info.TTL < 0 {
		s.TTLMillis = -1
	}
	for _, h := range info.Holders {
		mode := modeName(h)
		if info.Permits > 0 {
			mode = "permit"
		}
		s.Holders = append(s.Holders, holderJSON{Owner: h.Owner, Mode: mode, Holds: h.Holds, Info: h.Info})
	}
	return s
}

// permitsHeld is how many of a Semaphore's permits are held: its holders
// are one per distinct holder info.
func permitsHeld(info admin.LockInfo) int {
	n := 0
	for _, h := range info.Holders {
		n += h.Holds
	}
	return n
}

// stateOf is status's state of a lock: free; held (no one else gets in);
// shared (readers or some permits: more may join); full (every permit).
func stateOf(info admin.LockInfo) string {
	switch {
	case len(info.Holders) == 0:
		return "free"
	case info.Permits > 0 && permitsHeld(info) >= info.Permits:
		return "full"
	case info.Permits > 0 || !info.Holders[0].Write:
		return "shared" // the writer, if any, comes first
	}
	return "held"
}

// typeName is the CLI's name of a kind Describe reports: its Go type's,
// which status and ls have always printed; "" for none.
func typeName(kind observe.Kind) string {
	k, _ := family.Of(kind)
	return k.Type
}

// typeLabel is the type in words: Describe's kinds each stand for several
// of dlock's types, which it does not tell apart.
func typeLabel(typeName string) string {
	switch typeName {
	case "Mutex":
		return "Mutex (or a FairMutex with nobody queued, or a MultiLock's part)"
	case "RWMutex":
		return "RWMutex (or a ReentrantMutex)"
	}
	return typeName
}

func defineUnlock(fs *flag.FlagSet) action {
	redisFlag := fs.String("redis", "", redisFlagUsage)
	force := fs.Bool("force", false, "required: the lock is removed whoever holds it")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	return func(ctx context.Context, fs *flag.FlagSet, out *output) int {
		if fs.NArg() != 1 || !*force {
			return usageError(out, "unlock", "want --force and one lock NAME")
		}
		return unlock(ctx, fs.Arg(0), *redisFlag, *yes, out)
	}
}

// unlock removes the lock name, after asking unless yes.
func unlock(ctx context.Context, name, redisFlag string, yes bool, out *output) int {
	client, done, code := openLocks(ctx, "unlock", redisFlag, out)
	if client == nil {
		return code
	}
	defer done()
	if !yes {
		info, err := client.Describe(ctx, name)
		if err != nil {
			return reportError("unlock", err, out)
		}
		if len(info.Holders) == 0 {
			fmt.Fprintf(out.stdout, "%q is not held; nothing to remove\n", name)
			return 0
		}
		fmt.Fprintf(out.stderr, "Remove the lock %q, %s? Its holders will lose it. [y/N] ", name, holdersPhrase(info, ""))
		answer, _ := bufio.NewReader(out.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			fmt.Fprintln(out.stderr, "not removed")
			return exitFailure
		}
	}
	removed, err := client.ForceUnlock(ctx, name)
	if err != nil {
		return reportError("unlock", err, out)
	}
	if removed {
		fmt.Fprintf(out.stdout, "removed %q; its holders see the loss at their next renewal\n", name)
	} else {
		fmt.Fprintf(out.stdout, "%q is not held; nothing to remove\n", name)
	}
	return 0
}

func reportError(command string, err error, out *output) int {
	fmt.Fprintf(out.stderr, "dlock %s: %s\n", command, errText(err))
	return exitCodeOf(context.Background(), err)
}

// holderInfoLine is a holder's info on one line: "host web-1, pid 42,
// program deploy.sh, user …", leaving out what it does not say.
func holderInfoLine(info admin.HolderInfo) string {
	var parts []string
	if info.Hostname != "" {
		parts = append(parts, "host "+printable(info.Hostname))
	}
	if info.PID != 0 {
		parts = append(parts, fmt.Sprintf("pid %d", info.PID))
	}
	if info.Program != "" {
		parts = append(parts, "program "+printable(info.Program))
	}
	if info.User != "" {
		parts = append(parts, fmt.Sprintf("info %q", info.User))
	}
	return strings.Join(parts, ", ")
}
