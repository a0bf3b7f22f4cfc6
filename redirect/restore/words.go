package restore

import (
	"fmt"
	"strings"
)

// SplitRule splits one iptables-restore line (or a rule as iptables-save
// prints it) into words as the tool does: words are separated by spaces or
// tabs, a double-quoted string is one word (inside it a backslash takes the
// next character literally), and outside quotes a backslash is an ordinary
// character.
func SplitRule(line string) ([]string, error) {
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
