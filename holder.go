package dlock

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"unicode/utf8"

	"github.com/dlockio/dlock/admin"
	"github.com/dlockio/dlock/internal/scripts"
)

// ownerTokenBytes is the entropy of an owner token: 128 bits, unique
// anywhere. Its hex form is how scripts tell a Mutex's holder from foreign data.
const ownerTokenBytes = scripts.OwnerTokenDigits / 2

// newOwnerToken returns the random proof of who holds a lock, unique per
// acquisition. It is a secret: it never appears in logs or errors.
func newOwnerToken() string {
	var b [ownerTokenBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// newClientTag returns a random name for a Client's own channels, of the
// form the scripts read ([scripts.ProtocolTag], [scripts.ClientTagChars]).
func newClientTag() string {
	var b [scripts.ClientTagChars / 2]byte
	_, _ = rand.Read(b[:])
	return scripts.ProtocolTag + hex.EncodeToString(b[:])[len(scripts.ProtocolTag):]
}

// WithHolderInfo stores info with every hold, so operators see who holds a
// lock. A MultiLock, Election and Redlock refuse it. Info that is not valid
// UTF-8, has a negative PID or encodes longer than [admin.MaxHolderInfo] is
// refused with [ErrInvalid] by the first call. The zero value stores nothing.
func WithHolderInfo(info admin.HolderInfo) Option {
	encoded, err := encodeHolderInfo(info)
	return func(s *settings) { s.holderInfo, s.holderInfoErr, s.given = encoded, err, s.given|optHolderInfo }
}

// encodeHolderInfo is info as the scripts store it: JSON, starting with
// '{' (how the scripts find it after an owner token), or "" for none.
func encodeHolderInfo(info admin.HolderInfo) (string, error) {
	if info == (admin.HolderInfo{}) {
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
	b, _ := json.Marshal(info) // strings and an int: it cannot fail
	if len(b) > admin.MaxHolderInfo {
		return "", invalidf("holder info of %d bytes exceeds %d", len(b), admin.MaxHolderInfo)
	}
	return string(b), nil
}
