package dlock

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/dlockio/dlock/admin"
)

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
