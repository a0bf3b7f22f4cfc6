package restore

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Error is a restore the tool refused, mapped back to the payload.
type Error struct {
	// Command is the restore binary, e.g. "iptables-nft-restore".
	Command string
	// Line is the 1-based payload line at fault (0 when the tool named
	// none), and Rule its text. When the tool blamed a table's COMMIT line
	// for a rule's fault (iptables-nft reports a jump to a missing chain
	// there), Line is the first rule of that table jumping to the chain the
	// message names, if one does.
	Line int
	Rule string
	// ReportedLine is the line the tool named, when it differs from Line.
	ReportedLine int
	// Message is what the tool said went wrong, without its version banner
	// and usage hint.
	Message string
	// Stderr is the tool's own output, whole.
	Stderr string
	// Err is the command's failure (a *kernel.CommandError from
	// kernel.ExecRunner).
	Err error
}

func (e *Error) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.Command, e.Message)
	case e.ReportedLine != 0:
		return fmt.Sprintf("%s failed at line %d %q (reported at line %d, its table's COMMIT): %s",
			e.Command, e.Line, e.Rule, e.ReportedLine, e.Message)
	}
	return fmt.Sprintf("%s failed at line %d %q: %s", e.Command, e.Line, e.Rule, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// pastTheEnd is the Rule of an Error whose line is after the payload's last
// (a missing COMMIT).
const pastTheEnd = "(past the end of the input)"

// lineRE matches every way iptables 1.8.9 names the failing line:
// "Error occurred at line: N" (a rule the parser refused; nft also for a
// jump to a missing chain, at the table's COMMIT), "line N failed" (a
// command refused, and all legacy kernel refusals), "line N: CHAIN_DEL
// failed" (nft kernel refusals), "COMMIT expected at line N".
var lineRE = regexp.MustCompile(`(?:at line:? |line )(\d+)`)

// missingChainRE finds the chain a COMMIT-time failure is about, e.g.
// "Chain 'KUBE-X' does not exist" or "Couldn't load target `KUBE-X'".
var missingChainRE = regexp.MustCompile("[`'\"]([A-Za-z0-9_.-]+)'")

// bannerRE is the tool's name before its message, with or without its
// version: "iptables-nft-restore v1.8.9 (nf_tables): ", "iptables-restore: ".
var bannerRE = regexp.MustCompile(`^\S*tables\S*(?: v[0-9.]+(?: \([^)]*\))?)?:\s*`)

// newError maps a failed restore's stderr back to payload.
func newError(command string, payload []byte, stderr string, err error) *Error {
	e := &Error{Command: command, Message: summarize(stderr), Stderr: stderr, Err: err}
	if e.Message == "" && err != nil {
		e.Message = err.Error()
	}
	m := lineRE.FindStringSubmatch(stderr)
	if m == nil {
		return e
	}
	n, convErr := strconv.Atoi(m[1])
	if convErr != nil || n < 1 {
		return e
	}
	lines := strings.Split(strings.TrimSuffix(string(payload), "\n"), "\n")
	e.Line = n
	if n > len(lines) {
		e.Rule = pastTheEnd
		return e
	}
	e.Rule = lines[n-1]
	if strings.TrimSpace(e.Rule) == "COMMIT" {
		if line := blameAtCommit(lines, n, stderr); line > 0 {
			e.ReportedLine, e.Line, e.Rule = n, line, lines[line-1]
		}
	}
	return e
}

// blameAtCommit finds, for a failure reported at the COMMIT on line
// commitLine, the rule of that table section it is about: the first one
// jumping to the chain the message names, else the first one naming it at
// all. It returns 0 when the message names no chain or no rule names it.
func blameAtCommit(lines []string, commitLine int, stderr string) int {
	m := missingChainRE.FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	chain := m[1]
	start := 0
	for i := commitLine - 2; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "*") {
			start = i + 1
			break
		}
	}
	section := lines[start : commitLine-1]
	for i, l := range section {
		if strings.HasPrefix(l, "-") && JumpTarget(strings.Fields(l)) == chain {
			return start + i + 1
		}
	}
	for i, l := range section {
		if strings.HasPrefix(l, "-") && containsWord(l, chain) {
			return start + i + 1
		}
	}
	return 0
}

func containsWord(line, word string) bool {
	for _, f := range strings.Fields(line) {
		if f == word {
			return true
		}
	}
	return false
}

// summarize keeps the lines of a restore's stderr that say what went wrong:
// without the version banner, the usage hint and the line report (Error
// says which line).
func summarize(stderr string) string {
	var keep []string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(bannerRE.ReplaceAllString(strings.TrimSpace(l), ""))
		if l == "" || strings.HasPrefix(l, "Try `") || strings.HasPrefix(l, "Error occurred at line") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "; ")
}
