package restore

import (
	"fmt"
	"strings"
)

// CanaryChain is the empty chain the iptables mode keeps in mangle, nat and
// filter: its absence shows that someone flushed a table (kube-proxy's
// name, so operators' tools and cleanup agree on it).
const CanaryChain = "KUBE-PROXY-CANARY"

// The quoting rule, the one every rule kproxy writes follows: a comment is
// printed as iptables-save prints it (xtables' save_string), bare when it is
// made only of letters, digits, '-' and '_', otherwise in double quotes,
// with double quotes, backslashes and single quotes escaped by a backslash.
// iptables-restore reads that back as the same word (see SplitRule), so a
// rule written this way round-trips through the kernel unchanged (tested on
// both backends). Other words are printed bare; JoinRule quotes one only
// when it would not split back as itself.

// plainByte says whether c may stand in a bare (unquoted) comment.
func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// bare says whether a comment is printed without quotes.
func bare[T ~string | ~[]byte](w T) bool {
	for i := 0; i < len(w); i++ {
		if !plainByte(w[i]) {
			return false
		}
	}
	return len(w) > 0
}

func escapedByte(c byte) bool { return c == '"' || c == '\\' || c == '\'' }

// Quote returns s as iptables-save prints a comment (see the quoting rule).
func Quote(s string) string {
	if bare(s) {
		return s
	}
	return string(wrapTail([]byte(s), 0))
}

// QuoteTail quotes buf[start:] in place as iptables-save prints a comment,
// so that a comment written in pieces straight into a buffer is quoted as a
// whole without a copy.
func QuoteTail(buf []byte, start int) []byte {
	if bare(buf[start:]) {
		return buf
	}
	return wrapTail(buf, start)
}

// wrapTail puts buf[start:] in double quotes, escaping double quotes,
// backslashes and single quotes with a backslash.
func wrapTail(buf []byte, start int) []byte {
	escapes := 0
	for _, c := range buf[start:] {
		if escapedByte(c) {
			escapes++
		}
	}
	n := len(buf)
	buf = append(buf, make([]byte, 2+escapes)...)
	// Fill from the end, so the unread part of the word is never overwritten.
	w := len(buf) - 1
	buf[w] = '"'
	for r := n - 1; r >= start; r-- {
		w--
		buf[w] = buf[r]
		if escapedByte(buf[r]) {
			w--
			buf[w] = '\\'
		}
	}
	buf[start] = '"'
	return buf
}

// CommentMatch is the comment match "-m comment --comment <text>" with the
// text quoted by the quoting rule.
func CommentMatch(text string) string { return "-m comment --comment " + Quote(text) }

// JoinRule renders a rule's words as one line the way iptables-save prints
// them: the word after --comment by the quoting rule, any other word bare
// unless it would not split back as itself (empty, or holding a space, tab,
// carriage return or double quote), then in quotes with the same escapes.
func JoinRule(words []string) string {
	n := len(words) + 8
	for _, w := range words {
		n += len(w)
	}
	return string(appendJoined(make([]byte, 0, n), words))
}

// mustQuote says how JoinRule prints words[i]: quoted, or bare.
func mustQuote(words []string, i int) bool {
	w := words[i]
	if i > 0 && words[i-1] == "--comment" {
		return !bare(w)
	}
	for j := 0; j < len(w); j++ {
		switch w[j] {
		case ' ', '\t', '\r', '"':
			return true
		}
	}
	return w == ""
}

func appendJoined(dst []byte, words []string) []byte {
	for i, w := range words {
		if i > 0 {
			dst = append(dst, ' ')
		}
		start := len(dst)
		dst = append(dst, w...)
		if mustQuote(words, i) {
			dst = wrapTail(dst, start)
		}
	}
	return dst
}

// SplitRule splits one iptables-restore line (or a rule as iptables-save
// prints it) into words as the tool does: words are separated by spaces,
// tabs or carriage returns, a double-quoted string is part of a word
// (inside it a backslash takes the next character literally), and outside
// quotes a backslash is an ordinary character. Words without quotes are
// substrings of line, not copies: saves hold tens of thousands of rules.
func SplitRule(line string) ([]string, error) {
	words := make([]string, 0, 16)
	for i := 0; i < len(line); {
		if isSpace(line[i]) {
			i++
			continue
		}
		start := i
		for i < len(line) && !isSpace(line[i]) && line[i] != '"' {
			i++
		}
		if i == len(line) || line[i] != '"' {
			words = append(words, line[start:i])
			continue
		}
		word, next, err := quotedWord(line, start)
		if err != nil {
			return nil, err
		}
		words = append(words, word)
		i = next
	}
	return words, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// quotedWord reads the word starting at start that contains double quotes,
// returning it unquoted and the index after it.
func quotedWord(line string, start int) (string, int, error) {
	var b strings.Builder
	inQuote := false
	i := start
	for ; i < len(line); i++ {
		c := line[i]
		if !inQuote && isSpace(c) {
			break
		}
		switch {
		case inQuote && c == '\\' && i+1 < len(line):
			i++
			b.WriteByte(line[i])
		case c == '"':
			inQuote = !inQuote
		default:
			b.WriteByte(c)
		}
	}
	if inQuote {
		return "", 0, fmt.Errorf("unterminated quote in %q", line)
	}
	return b.String(), i, nil
}

// JumpTarget is the chain or target a rule's words jump or go to: the word
// after its last -j, --jump, -g or --goto, or "" when it names none.
func JumpTarget(words []string) string {
	for i := len(words) - 2; i >= 0; i-- {
		switch words[i] {
		case "-j", "--jump", "-g", "--goto":
			return words[i+1]
		}
	}
	return ""
}
