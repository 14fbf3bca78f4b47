package scripts

import (
	"slices"
	"testing"
)

// Every script is loaded with its lock type's when a server does not know
// it: none is left out of typeScripts.
func TestCompanions_EveryScriptComesWithItsType(t *testing.T) {
	for s, a := range assembled {
		if !slices.Contains(Companions(s), a.src) {
			t.Errorf("script %s is not among its own companions: add it to typeScripts", s.Hash())
		}
	}
}
