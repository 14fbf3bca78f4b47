package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dlockio/dlock"
)

const statusUsage = `Usage: dlock status [--json] NAME

Shows the lock NAME: its type, who holds it (owner ids and hold counts; a
Mutex's owner is a secret and stays hidden; the host, pid and program a
dlock run or a program's WithHolderInfo stored), how long until it expires unless
renewed, who waits for it, and the last fencing token handed out.

Examples:
  dlock status deploy:web
  dlock status --json nightly-report | jq .holders
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
	Type           string       `json:"type"` // "Mutex", "RWMutex", "Semaphore" or "free"
	Held           bool         `json:"held"`
	Holders        []holderJSON `json:"holders"`
	TTLMillis      int64        `json:"ttl_ms"` // -1: no expiry; 0: not held
	WritersWaiting int          `json:"writers_waiting"`
	ReadersWaiting int          `json:"readers_waiting"`
	LastToken      uint64       `json:"last_token"`
	Permits        int          `json:"permits,omitempty"` // a Semaphore's
}

type holderJSON struct {
	Owner string            `json:"owner"` // "" for a Mutex
	Mode  string            `json:"mode"`  // "write", "read" or "permit"
	Holds int               `json:"holds"`
	Info  *dlock.HolderInfo `json:"info,omitempty"` // who holds it, as stored by dlock run or WithHolderInfo
}

func runStatus(ctx context.Context, args []string, out *output) int {
	fs := newFlagSet("status", statusUsage, out)
	redisFlag := fs.String("redis", "", "Redis URL (default: REDIS_URL, else "+defaultRedisURL+")")
	asJSON := fs.Bool("json", false, "print JSON, for scripts")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(out.stderr, "dlock status: want one lock NAME; see dlock status --help")
		return exitUsage
	}
	client, done, code := openLocks(ctx, "status", *redisFlag, out)
	if client == nil {
		return code
	}
	defer done()
	info, err := client.Describe(ctx, fs.Arg(0))
	if err != nil {
		return reportError("status", err, out)
	}
	s := statusJSON{Name: info.Name, Type: info.Type, Held: len(info.Holders) > 0, Holders: []holderJSON{},
		TTLMillis: info.TTL.Milliseconds(), WritersWaiting: info.WritersWaiting,
		ReadersWaiting: info.ReadersWaiting, LastToken: info.LastToken, Permits: info.Permits}
	if info.TTL < 0 {
		s.TTLMillis = -1
	}
	if s.Type == "" {
		s.Type = "free"
	}
	for _, h := range info.Holders {
		mode := modeName(h)
		if info.Permits > 0 {
			mode = "permit"
		}
		s.Holders = append(s.Holders, holderJSON{Owner: h.Owner, Mode: mode, Holds: h.Holds, Info: h.Info})
	}
	if *asJSON {
		enc := json.NewEncoder(out.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s)
		return 0
	}
	fmt.Fprintf(out.stdout, "name:        %s\n", s.Name)
	if !s.Held {
		fmt.Fprintf(out.stdout, "state:       free\n")
	} else {
		fmt.Fprintf(out.stdout, "type:        %s\n", s.Type)
		if s.Permits > 0 {
			fmt.Fprintf(out.stdout, "permits:     %d\n", s.Permits)
		}
		for i, h := range s.Holders {
			label := "holders:"
			if i > 0 {
				label = ""
			}
			owner := h.Owner
			if owner == "" {
				owner = "(owner token hidden)"
			}
			fmt.Fprintf(out.stdout, "%-12s %s  %s ×%d\n", label, owner, h.Mode, h.Holds)
			if h.Info != nil {
				fmt.Fprintf(out.stdout, "%-12s %s\n", "", holderInfoLine(*h.Info))
			}
		}
		ttl := "no expiry"
		if info.TTL >= 0 {
			ttl = info.TTL.String()
		}
		fmt.Fprintf(out.stdout, "ttl:         %s\n", ttl)
	}
	fmt.Fprintf(out.stdout, "waiting:     %d writers, %d readers\n", s.WritersWaiting, s.ReadersWaiting)
	fmt.Fprintf(out.stdout, "last token:  %d\n", s.LastToken)
	return 0
}

func runUnlock(ctx context.Context, args []string, out *output) int {
	fs := newFlagSet("unlock", unlockUsage, out)
	redisFlag := fs.String("redis", "", "Redis URL (default: REDIS_URL, else "+defaultRedisURL+")")
	force := fs.Bool("force", false, "required: the lock is removed whoever holds it")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() != 1 || !*force {
		fmt.Fprintln(out.stderr, "dlock unlock: want --force and one lock NAME; see dlock unlock --help")
		return exitUsage
	}
	name := fs.Arg(0)
	client, done, code := openLocks(ctx, "unlock", *redisFlag, out)
	if client == nil {
		return code
	}
	defer done()
	if !*yes {
		info, err := client.Describe(ctx, name)
		if err != nil {
			return reportError("unlock", err, out)
		}
		if len(info.Holders) == 0 {
			fmt.Fprintf(out.stdout, "%q is not held; nothing to remove\n", name)
			return 0
		}
		fmt.Fprintf(out.stderr, "Remove the lock %q held by %s? Its holders will lose it. [y/N] ", name, describeHolders(info.Holders))
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
	fmt.Fprintf(out.stderr, "dlock %s: %v\n", command, err)
	return exitCodeOf(context.Background(), err)
}

// holderInfoLine is a holder's info on one line: "host web-1, pid 42,
// program deploy.sh, user …", leaving out what it does not say.
func holderInfoLine(info dlock.HolderInfo) string {
	var parts []string
	if info.Hostname != "" {
		parts = append(parts, "host "+info.Hostname)
	}
	if info.PID != 0 {
		parts = append(parts, fmt.Sprintf("pid %d", info.PID))
	}
	if info.Program != "" {
		parts = append(parts, "program "+info.Program)
	}
	if info.User != "" {
		parts = append(parts, fmt.Sprintf("info %q", info.User))
	}
	return strings.Join(parts, ", ")
}
