package dlock

import (
	"crypto/rand"
	"encoding/hex"

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
