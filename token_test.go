package dlock

import (
	"encoding/hex"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// An owner token is the only proof of ownership a script checks: two equal
// tokens would let one holder release another's lock. A million of them
// must be distinct, each 128 random bits at least.
func TestOwnerTokens_AMillionAreDistinct(t *testing.T) {
	const n = 1_000_000
	seen := make(map[[ownerTokenBytes]byte]struct{}, n)
	for i := range n {
		tok := newOwnerToken()
		raw, err := hex.DecodeString(tok)
		if err != nil || len(raw) < 16 {
			t.Fatalf("token %d: %d bytes of hex (err %v); want 128 bits or more", i, len(raw), err)
		}
		key := [ownerTokenBytes]byte(raw)
		if _, dup := seen[key]; dup {
			t.Fatalf("token %d repeats an earlier one", i)
		}
		seen[key] = struct{}{}
	}
}

// Tokens must come from crypto/rand: math/rand's output can be predicted
// from a few samples, which would let anyone forge a holder's proof. (The
// jitter of Redlock's retries may use math/rand; tokens may not.)
func TestOwnerTokens_ComeFromCryptoRand(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "holder.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		imports[path] = true
	}
	if !imports["crypto/rand"] || imports["math/rand"] || imports["math/rand/v2"] {
		t.Fatalf("holder.go imports %v; want crypto/rand and no math/rand", imports)
	}
}
