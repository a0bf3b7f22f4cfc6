package rulespec

import (
	"strings"

	"kproxy.dev/kproxy/redirect/restore"
)

// Split splits one iptables-restore line into words as the tool does (see
// restore.SplitRule, which kproxy's own code uses too).
func Split(line string) ([]string, error) { return restore.SplitRule(line) }

// Join renders words as one line the way iptables-save prints a rule: a
// comment is quoted unless it is made only of letters, digits, '-' and '_'
// (iptables-save's rule), and any other word that would not survive Split
// unquoted (empty, or holding a space, tab or quote) is quoted too.
func Join(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		switch {
		case i > 0 && words[i-1] == "--comment":
			out[i] = quoteComment(w)
		case w == "" || strings.ContainsAny(w, " \t\r\""):
			out[i] = quote(w)
		default:
			out[i] = w
		}
	}
	return strings.Join(out, " ")
}

func quoteComment(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == "" {
		return s
	}
	return quote(s)
}

// quote wraps s in double quotes, escaping the characters iptables-save
// escapes.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`"\'`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}
