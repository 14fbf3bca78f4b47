package fcall

import (
	"errors"
	"testing"
)

// The servers' words for a missing script and for refused Functions, as
// Redis 6, 7 and 8 and Valkey say them.
func TestErrors_TellAMissingScriptFromRefusedFunctions(t *testing.T) {
	for _, c := range []struct {
		msg               string
		noScript, refused bool
	}{
		{"NOSCRIPT No matching script. Please use EVAL.", true, false},
		{"ERR Function not found", true, false},
		{"ERR unknown command 'fcall', with args beginning with: 'dlock_x' '1' ", false, true},
		{"ERR unknown command `function`, with args beginning with: `load` ", false, true},
		{"NOPERM User u has no permissions to run the 'fcall' command", false, true},
		{"NOPERM User u has no permissions to run the 'function|load' command", false, true},
		{"NOPERM No permissions to access a key", false, false},
		{"ERR unknown command 'wait'", false, false},
	} {
		err := errors.New(c.msg)
		if got := isNoScript(err); got != c.noScript {
			t.Errorf("isNoScript(%q) = %v", c.msg, got)
		}
		if got := refusesFunctions(err); got != c.refused {
			t.Errorf("refusesFunctions(%q) = %v", c.msg, got)
		}
	}
}

func TestRedirection_ReadsMovedAndAsk(t *testing.T) {
	for _, c := range []struct {
		msg     string
		addr    string
		ask, ok bool
	}{
		{"MOVED 3999 127.0.0.1:7001", "127.0.0.1:7001", false, true},
		{"ASK 3999 127.0.0.1:7002", "127.0.0.1:7002", true, true},
		{"ERR MOVED 3999 127.0.0.1:7001", "", false, false},
		{"CLUSTERDOWN The cluster is down", "", false, false},
	} {
		addr, ask, ok := redirection(errors.New(c.msg))
		if addr != c.addr || ask != c.ask || ok != c.ok {
			t.Errorf("redirection(%q) = %q, %v, %v", c.msg, addr, ask, ok)
		}
	}
	if _, _, ok := redirection(nil); ok {
		t.Error("no error read as a redirection")
	}
}
