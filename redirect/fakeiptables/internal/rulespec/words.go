package rulespec

import (
	"fmt"
	"strings"
)

// Split splits one iptables-restore line into words as the tool does:
// words are separated by spaces or tabs, a double-quoted string is one word
// (inside it a backslash takes the next character literally), and outside
// quotes a backslash is an ordinary character.
func Split(line string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		quoted bool
		inWord bool
	)
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quoted && ch == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case ch == '"':
			quoted, inWord = !quoted, true
		case !quoted && (ch == ' ' || ch == '\t' || ch == '\r'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

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
