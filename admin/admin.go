// Package admin holds what dlock reports to operators and their tools,
// cmd/dlock among them. [LockInfo] (from dlock.Client.Describe) says who
// holds a lock; [HolderInfo] (stored with dlock.WithHolderInfo) who a
// holder is; [Report] (from dlock.Client.Check) what is wrong with a server.
package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"

	"github.com/dlockio/dlock/observe"
)

// LockInfo is what dlock.Client.Describe found under a lock name. Its Kind
// is as far as Redis can tell: KindFair only with someone queued; for a
// read-write lock, KindRead while anyone reads, else KindReentrant when a
// ReentrantMutex took the writer's latest hold, else KindWrite; never
// KindMulti or KindRedlock, whose locks are Mutexes in Redis.
type LockInfo struct {
	Name           string
	Kind           observe.Kind  // "" when nothing holds it; see above
	LeaderValue    string        // an Election's: the value its leader campaigned with; else ""
	Holders        []Holder      // the writer (or a Mutex's holder) first; for a Semaphore, one Holder per holder info counting its permits (those without info first)
	Permits        int           // a Semaphore's number of permits; else 0
	TTL            time.Duration // until the last hold expires unless renewed; -1: no expiry; 0: not held
	WritersWaiting int           // waiting Locks registered to be woken (a Mutex's, or an RWMutex's writers)
	ReadersWaiting int           // waiting RLocks registered to be woken
	LastToken      uint64        // the highest fencing token minted for the name; 0 once its counter expired (see dlock.Lease.Token)
}

// Holder is one owner holding a lock.
type Holder struct {
	// Owner is the holder's owner id as [OwnerHash] shows it; "" for a
	// Mutex, whose owner token is a secret.
	Owner string
	Write bool // holds the exclusive (write) side; else reads
	Holds int  // how many holds (re-entries counted)

	// Info is what the holder stored with dlock.WithHolderInfo; nil when
	// it stored none (or its lock type keeps none).
	Info *HolderInfo
}

// OwnerHash is how dlock.Client.Describe shows the owner id of an RWMutex
// or ReentrantMutex holder: 12 hex digits of its SHA-256. The id itself is
// never shown, since dlock.WithOwner(id) joins that owner's holds,
// exclusive ones with their fencing token.
func OwnerHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:6])
}

// HolderInfo describes who holds a lock, for people: dlock.Client.Describe
// shows it beside each holder. Set with dlock.WithHolderInfo, it is stored
// in Redis with the hold, in plain text: put nothing secret in it.
// [ThisProcess] fills in the first three fields.
type HolderInfo struct {
	Hostname string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Program  string `json:"program,omitempty"`
	User     string `json:"user,omitempty"` // free text: a person, a job id, a deploy…
}

// MaxHolderInfo bounds a [HolderInfo] as stored (as JSON), in bytes: a
// fixed cost per holder whatever the caller passes.
const MaxHolderInfo = 512

// ThisProcess is the HolderInfo of the running process: its hostname, pid
// and program name (the executable's base name).
func ThisProcess() HolderInfo {
	host, _ := os.Hostname()
	program := ""
	if len(os.Args) > 0 {
		program = filepath.Base(os.Args[0])
	}
	return HolderInfo{Hostname: host, PID: os.Getpid(), Program: program}
}
