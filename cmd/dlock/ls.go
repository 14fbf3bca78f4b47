package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/admin"
)

const lsUsage = `Usage: dlock ls [--json] [--all] [--limit N] [PATTERN]

Lists the locks whose names match PATTERN (a Redis glob: * ? [abc]; default
every name), one line each, sorted by name: type, state (as dlock status
says it), how long their holds last unless renewed, how many wait (writers, and
readers with an r), the last fencing token, and the holders: each by the
host, pid and program it stored (a dlock run stores them), else by its owner
id's hash; a Semaphore's permits; a Mutex's owner is a secret and stays
hidden.

It finds them with SCAN over dlock's key prefix, on every master of a
cluster (never KEYS), and asks each name's state in one round trip
(dlock.Client.Describe). It shows --limit locks at most, the first by name:
a listing cut there says so on stderr ("cut" in --json). Names whose keys
remain only for their fencing counter (free locks) are left out unless
--all. A name whose keys hold what dlock did not write is listed as not
dlock's.

Examples:
  dlock ls
  dlock ls 'deploy:*'
  dlock ls --json --all | jq -r '.locks[] | select(.writers_waiting > 0) | .name'

Exit codes: 0 listed (also when cut); 2 bad flags or PATTERN; 69 Redis could
not be reached or failed; 77 Redis refused the login or a command.
`

// defaultLsLimit is how many locks one ls (or one refresh of watch) shows
// unless --limit says otherwise: a screenful many times over, and a few
// hundred milliseconds of round trips.
const defaultLsLimit = 1000

// scanCount is each SCAN's COUNT: how many keys a master looks at per call,
// so that no call keeps it from other clients for long.
const scanCount = 1000

// describers is how many Describe calls an ls has in flight at once.
const describers = 8

// lsListing is what ls --json prints.
type lsListing struct {
	Locks []lsLockJSON `json:"locks"`
	Cut   bool         `json:"cut"` // more names matched than --limit: the listing is not all
}

// lsLockJSON is one lock of ls --json: what status --json says of it, or why
// its keys are not dlock's.
type lsLockJSON struct {
	statusJSON
	NotDlocks string `json:"not_dlocks,omitempty"` // set when state is "foreign": the key and what it holds
}

// lockQuery is which locks ls and watch show.
type lockQuery struct {
	pattern string // a glob of names
	limit   int    // of locks shown, the first by name
	all     bool   // free locks too
}

func defineLs(fs *flag.FlagSet) action {
	redisFlag := fs.String("redis", "", redisFlagUsage)
	asJSON := fs.Bool("json", false, "print JSON, for scripts")
	all := fs.Bool("all", false, "list free locks too (whose fencing counter remains)")
	limit := fs.Int("limit", defaultLsLimit, "show `N` locks at most, the first by name")
	return func(ctx context.Context, fs *flag.FlagSet, out *output) int {
		q := lockQuery{pattern: "*", limit: *limit, all: *all}
		switch {
		case fs.NArg() > 1:
			return usageError(out, "ls", "want at most one PATTERN")
		case fs.NArg() == 1:
			q.pattern = fs.Arg(0)
		}
		if code, bad := checkQuery(out, "ls", q); bad {
			return code
		}
		return ls(ctx, q, *redisFlag, *asJSON, out)
	}
}

// checkQuery refuses a query that cannot be sent.
func checkQuery(out *output, command string, q lockQuery) (code int, bad bool) {
	switch {
	case q.limit < 1:
		return usageError(out, command, "--limit must be at least 1"), true
	case strings.ContainsAny(q.pattern, "{}"):
		// A lock name holds no brace: it is the keys' cluster hash tag.
		return usageError(out, command, "PATTERN %q contains '{' or '}'", q.pattern), true
	}
	return 0, false
}

func ls(ctx context.Context, q lockQuery, redisFlag string, asJSON bool, out *output) int {
	client, rdb, done, code := openClient(ctx, "ls", redisFlag, out)
	if client == nil {
		return code
	}
	defer done()
	found, err := findLocks(ctx, client, rdb, q)
	if err != nil {
		return reportError("ls", err, out)
	}
	if asJSON {
		listing := lsListing{Locks: []lsLockJSON{}, Cut: found.cut}
		for _, l := range found.locks {
			listing.Locks = append(listing.Locks, l.json())
		}
		writeJSON(out.stdout, listing)
		return 0
	}
	printLocks(out.stdout, found.locks, nil)
	if found.cut {
		fmt.Fprintf(out.stderr, "dlock ls: cut at %d locks; more match: narrow the PATTERN or raise --limit\n", q.limit)
	}
	return 0
}

// foundLock is one name's state, or why its keys are not dlock's.
type foundLock struct {
	info      admin.LockInfo
	notDlocks error // dlock.ErrWrongType, naming the key; or the name's ErrInvalid
}

func (l foundLock) json() lsLockJSON {
	if l.notDlocks != nil {
		return lsLockJSON{statusJSON: statusJSON{Name: l.info.Name, State: "foreign", Holders: []holderJSON{}}, NotDlocks: l.notDlocks.Error()}
	}
	return lsLockJSON{statusJSON: statusOf(l.info)}
}

// inUse says whether anyone holds the lock or waits for it, or its keys are
// not dlock's: what ls shows without --all.
func (l foundLock) inUse() bool {
	return l.notDlocks != nil || len(l.info.Holders) > 0 || l.info.WritersWaiting+l.info.ReadersWaiting > 0
}

// foundLocks are the locks a query found, sorted by name.
type foundLocks struct {
	locks []foundLock
	cut   bool // more locks matched than the query's limit
}

// findLocks finds q's locks: the first q.limit in use (or, with q.all,
// whose keys remain) in name order. Every name is scanned for, so that the
// rows are the first by name whatever order SCAN meets them in, and they
// are described in that order, a batch at a time, until limit rows and one
// more (the listing is cut) are found, or the names run out.
func findLocks(ctx context.Context, client *dlock.Client, rdb redis.UniversalClient, q lockQuery) (foundLocks, error) {
	names, err := scanNames(ctx, rdb, q.pattern)
	if err != nil {
		return foundLocks{}, err
	}
	var found foundLocks
	for len(names) > 0 {
		batch := names[:min(max(q.limit+1-len(found.locks), describers), len(names))]
		names = names[len(batch):]
		locks, err := describeAll(ctx, client, batch)
		if err != nil {
			return foundLocks{}, err
		}
		for _, l := range locks {
			if !q.all && !l.inUse() {
				continue
			}
			if len(found.locks) == q.limit {
				found.cut = true
				return found, nil
			}
			found.locks = append(found.locks, l)
		}
	}
	return found, nil
}

// scanNames returns the names of the locks matching pattern, sorted. Every
// key of a lock starts with the prefix and its name in braces
// (docs/ARCHITECTURE.md, "Keys and channels"), so one name may be met
// several times.
func scanNames(ctx context.Context, rdb redis.UniversalClient, pattern string) (names []string, err error) {
	start := dlock.DefaultPrefix + "{"
	match := start + pattern + "}*"
	var mu sync.Mutex
	seen := map[string]bool{}
	scan := func(ctx context.Context, node redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, match, scanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, key := range keys {
				if name, _, ok := strings.Cut(strings.TrimPrefix(key, start), "}"); ok {
					seen[name] = true
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		// Each master holds its own slots' keys; SCAN sees one node's only.
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("listing locks: %w", err)
	}
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// describeAll describes each of names, a few at a time.
func describeAll(ctx context.Context, client *dlock.Client, names []string) ([]foundLock, error) {
	locks := make([]foundLock, len(names))
	errs := make([]error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(describers, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				info, err := client.Describe(ctx, names[i])
				info.Name = names[i]
				switch {
				case errors.Is(err, dlock.ErrWrongType), errors.Is(err, dlock.ErrInvalid):
					// A key under the prefix that dlock did not write, or
					// whose braces hold no name dlock would take.
					locks[i] = foundLock{info: info, notDlocks: err}
				case err != nil:
					errs[i] = err
				default:
					locks[i] = foundLock{info: info}
				}
			}
		}()
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	return locks, errors.Join(errs...)
}

// lockColumns head the columns of ls and watch.
var lockColumns = []string{"NAME", "TYPE", "STATE", "TTL", "WAITING", "TOKEN", "HOLDERS"}

// printLocks prints one line per lock under a header, in aligned columns;
// extra, when given, adds a column (watch's rate) of each lock's name
// before the holders, the one column of no fixed width. extra("") is its
// header.
func printLocks(w io.Writer, locks []foundLock, extra func(name string) string) {
	line := func(columns []string, name string) []string {
		if extra != nil {
			last := len(columns) - 1
			columns = append(columns[:last:last], extra(name), columns[last])
		}
		return columns
	}
	rows := [][]string{line(lockColumns, "")}
	for _, l := range locks {
		rows = append(rows, line(l.columns(), l.info.Name))
	}
	printTable(w, rows)
}

// printTable prints rows in columns two apart, padded by the columns a
// terminal gives their characters (text/tabwriter counts runes, which
// shifts a row of wide ones). The last column is not padded.
func printTable(w io.Writer, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row[:len(row)-1] {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], stringColumns(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, cell := range row[:len(row)-1] {
			b.WriteString(cell)
			b.WriteString(strings.Repeat(" ", widths[i]-stringColumns(cell)+2))
		}
		b.WriteString(row[len(row)-1])
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(w, b.String())
}

// columns is the lock's line, by lockColumns.
func (l foundLock) columns() []string {
	info := l.info
	if l.notDlocks != nil {
		return []string{printable(info.Name), "-", "not dlock's", "-", "-", "-", "-"}
	}
	lockType := typeName(info.Kind)
	if lockType == "" {
		lockType = "-"
	}
	waiting := fmt.Sprint(info.WritersWaiting)
	if info.ReadersWaiting > 0 {
		waiting = fmt.Sprintf("%d+%dr", info.WritersWaiting, info.ReadersWaiting)
	}
	return []string{printable(info.Name), lockType, stateOf(info), ttlText(info.TTL), waiting, fmt.Sprint(info.LastToken),
		printable(holdersText(info))}
}

// ttlText is a TTL in few characters: tenths of seconds under a minute.
func ttlText(ttl time.Duration) string {
	switch {
	case ttl < 0:
		return "never"
	case ttl == 0:
		return "-"
	case ttl < time.Minute:
		return ttl.Round(100 * time.Millisecond).String()
	}
	return ttl.Round(time.Second).String()
}

// maxHoldersText bounds the holders column: a lock with hundreds of readers
// is still one line.
const maxHoldersText = 60

// holdersText names a lock's holders: owner ids with their modes and holds,
// a Semaphore's permits, or a hidden Mutex owner. It is raw: each output
// escapes it once, in its own way.
func holdersText(info admin.LockInfo) string {
	if len(info.Holders) == 0 {
		return "-"
	}
	if info.Permits > 0 {
		return permitsText(info)
	}
	var parts []string
	for _, h := range info.Holders {
		part := holderLabel(h) + " " + modeName(h)
		if h.Holds > 1 {
			part += fmt.Sprintf(" ×%d", h.Holds)
		}
		parts = append(parts, part)
	}
	text := strings.Join(parts, ", ")
	if len(text) > maxHoldersText {
		shown := 0
		for n := 0; shown < len(parts) && n+len(parts[shown]) <= maxHoldersText-12; shown++ {
			n += len(parts[shown]) + 2
		}
		if shown == 0 { // one holder longer than the column: its beginning
			parts[0], shown = cutTo(parts[0], maxHoldersText-13)+"…", 1
		}
		text = strings.Join(parts[:shown], ", ")
		if more := len(parts) - shown; more > 0 {
			text += fmt.Sprintf(" …+%d more", more)
		}
	}
	return text
}

// permitsText counts a Semaphore's permits held, as status does.
func permitsText(info admin.LockInfo) string {
	return fmt.Sprintf("%d of %d permits held", permitsHeld(info), info.Permits)
}

// holderLabel names a holder, raw: by the host, pid and program it stored
// (WithHolderInfo, or a dlock run), as status shows them; else by its owner
// id's hash, or hidden (a Mutex's).
func holderLabel(h admin.Holder) string {
	if h.Info != nil {
		var parts []string
		if h.Info.Hostname != "" {
			parts = append(parts, h.Info.Hostname)
		}
		if h.Info.PID != 0 {
			parts = append(parts, fmt.Sprintf("pid %d", h.Info.PID))
		}
		if h.Info.Program != "" {
			parts = append(parts, h.Info.Program)
		}
		if len(parts) > 0 {
			return strings.Join(parts, " ")
		}
	}
	if h.Owner == "" {
		return hiddenOwner
	}
	return h.Owner
}

// hiddenOwner stands for a Mutex holder's owner, a secret.
const hiddenOwner = "(owner hidden)"
