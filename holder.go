package dlock

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"unicode/utf8"
)

// Holder is one owner holding a lock.
type Holder struct {
	// Owner is the holder's owner id as [OwnerHash] shows it; "" for a
	// Mutex, whose owner token is a secret.
	Owner string
	Write bool // holds the exclusive (write) side; else reads
	Holds int  // how many holds (re-entries counted)

	// Info is what the holder stored with [WithHolderInfo]; nil when it
	// stored none (or its lock type keeps none).
	Info *HolderInfo
}

// OwnerHash is how [Client.Describe] shows the owner id of an RWMutex or
// ReentrantMutex holder: 12 hex digits of its SHA-256. The id is never
// shown: whoever knows it joins that owner's holds.
func OwnerHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:6])
}

// HolderInfo describes who holds a lock, for people: [Client.Describe] and
// `dlock status` show it. It is stored with the hold in plain text: put
// nothing secret in it. Set it with [WithHolderInfo].
type HolderInfo struct {
	Hostname string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Program  string `json:"program,omitempty"`
	User     string `json:"user,omitempty"` // free text: a person, a job id, a deploy…
}

// MaxHolderInfo bounds a [HolderInfo] as stored (as JSON), in bytes.
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

// WithHolderInfo stores info with every hold taken, renewed and removed
// with it, so operators see who holds a lock. A MultiLock, Election and
// Redlock refuse it. Info that is not valid UTF-8, has a negative PID or
// encodes longer than [MaxHolderInfo] is refused with [ErrInvalid] by the
// first call. The zero HolderInfo stores nothing.
func WithHolderInfo(info HolderInfo) Option {
	encoded, err := encodeHolderInfo(info)
	return func(s *settings) { s.holderInfo, s.holderInfoErr, s.given = encoded, err, s.given|optHolderInfo }
}

// encodeHolderInfo is info as the scripts store it: JSON, starting with
// '{' (how the scripts find it after an owner token), or "" for none.

func encodeHolderInfo(info HolderInfo) (string, error) {
	if info == (HolderInfo{}) {
		return "", nil
	}
	for _, field := range []string{info.Hostname, info.Program, info.User} {
		if !utf8.ValidString(field) {
			return "", invalidf("holder info %q is not valid UTF-8", field)
		}
	}
	if info.PID < 0 {
		return "", invalidf("holder info's pid %d is negative", info.PID)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return "", invalidf("holder info: %v", err)
	}
	if len(b) > MaxHolderInfo {
		return "", invalidf("holder info of %d bytes exceeds %d", len(b), MaxHolderInfo)
	}
	return string(b), nil
}

// decodeHolderInfo reads what a script returned of a holder's info: nil
// for none, or for what is not a HolderInfo (written by a newer version).
func decodeHolderInfo(stored string) *HolderInfo {
	if stored == "" {
		return nil
	}
	var info HolderInfo
	if json.Unmarshal([]byte(stored), &info) != nil {
		return nil
	}
	return &info
}
