package main

import (
	"strconv"
	"strings"
)

// printable is s as the text outputs show it: unchanged when every rune of
// it prints, else escaped as Go quotes a string (\x1b, \n, \u202e…),
// without the quotes. Lock names, owner ids and holder info come from
// whoever uses a lock, or writes to Redis: a control character printed raw
// could clear the operator's screen, retitle the terminal or forge a line
// of the listing. JSON outputs escape them already.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) < 0 && !strings.ContainsRune(s, '\uFFFD') {
		return s
	}
	quoted := strconv.Quote(s)
	return quoted[1 : len(quoted)-1]
}
