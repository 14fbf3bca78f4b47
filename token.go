package dlock

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/dlockio/dlock/internal/scripts"
)

// ownerTokenBytes is the entropy of an owner token: 128 bits, so that no two
// acquisitions anywhere ever present the same proof of ownership. Its form,
// scripts.OwnerTokenDigits lowercase hex digits, is how the scripts tell a
// Mutex's holder from a string dlock did not write.
const ownerTokenBytes = scripts.OwnerTokenDigits / 2

// newOwnerToken returns the value that proves who holds a lock: random, from
// crypto/rand, unique per acquisition. It is a secret of the holder: whoever
// knows it can release or extend the hold, so it never appears in logs or
// error strings.
func newOwnerToken() string {
	var b [ownerTokenBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// newOwnerTokenPair returns two owner tokens drawn at once, in one
// allocation: a read-write hold's id and the id of the new owner it is for.
func newOwnerTokenPair() (string, string) {
	var b [2 * ownerTokenBytes]byte
	_, _ = rand.Read(b[:])
	var digits [2 * scripts.OwnerTokenDigits]byte
	hex.Encode(digits[:], b[:])
	both := string(digits[:])
	return both[:scripts.OwnerTokenDigits], both[scripts.OwnerTokenDigits:]
}

// newClientTag returns a random name for a Client's own channels: two
// Clients that drew the same would each hear the other's wake-ups, and
// ignore them, as they name waiters the other does not have.
// It starts with the protocol's tag, which the scripts read (see
// [scripts.ProtocolTag]), and is [scripts.ClientTagChars] long, as they
// take it.
func newClientTag() string {
	var b [scripts.ClientTagChars / 2]byte
	_, _ = rand.Read(b[:])
	return scripts.ProtocolTag + hex.EncodeToString(b[:])[len(scripts.ProtocolTag):]
}
