package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// printable is s as the text outputs show it: unchanged when every rune of
// it prints, else escaped as Go quotes a string (\x1b, \n, \u202e…),
// without the quotes. Lock names, owner ids and holder info come from
// whoever uses a lock, or writes to Redis: a control character printed raw
// could clear the operator's screen, retitle the terminal or forge a line
// of the listing. JSON outputs escape them too (writeJSON).
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) < 0 && !strings.ContainsRune(s, '\uFFFD') {
		return s
	}
	quoted := strconv.Quote(s)
	return quoted[1 : len(quoted)-1]
}

// writeJSON writes v as indented JSON in which every rune that does not
// print is escaped: encoding/json leaves C1 controls and bidi overrides
// raw. Outside strings JSON holds only printable ASCII, so this changes
// strings alone, and a JSON reader decodes them as they were.
func writeJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	var out strings.Builder
	for _, r := range string(b) {
		switch {
		case r == '\n' || strconv.IsPrint(r):
			out.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	out.WriteByte('\n')
	_, _ = io.WriteString(w, out.String())
}
