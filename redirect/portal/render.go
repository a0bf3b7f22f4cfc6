package portal

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// StaleChain is a chain of an older proxy (kube-proxy's userspace mode)
// that kproxy removes on a full sync, together with the rules jumping to it
// (as iptables-save printed them).
type StaleChain struct {
	Table string
	Name  string
	Jumps []string // "-A INPUT ... -j NAME" lines from iptables-save
}

// staleChainNames are chains an earlier userspace proxy created that
// kproxy's rules replace: kube-proxy's KUBE-NODEPORT-NON-LOCAL ACCEPTed
// traffic to proxy ports, which the open-relay guard must not be preceded by.
func staleChainNames() map[string][]string {
	return map[string][]string{TableFilter: {"KUBE-NODEPORT-NON-LOCAL"}}
}

// Payload renders the iptables-restore --noflush input that replaces the
// contents of kproxy's chains with rs, one table section per table. A
// declaration ":CHAIN - [0:0]" creates the chain or, under --noflush, empties
// it, so every chain is rewritten whole and no other chain is touched.
// Stale chains are flushed, unhooked and deleted in the same batch.
func Payload(rs *Ruleset, stale []StaleChain) []byte {
	var b bytes.Buffer
	for _, t := range rs.Tables() {
		fmt.Fprintf(&b, "*%s\n", t.Name)
		for _, c := range t.Chains {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c)
		}
		var staleHere []StaleChain
		for _, s := range stale {
			if s.Table == t.Name {
				staleHere = append(staleHere, s)
				fmt.Fprintf(&b, ":%s - [0:0]\n", s.Name)
			}
		}
		for _, r := range t.Rules {
			b.WriteString(r.String())
			b.WriteByte('\n')
		}
		for _, s := range staleHere {
			for _, j := range s.Jumps {
				b.WriteString("-D" + strings.TrimPrefix(j, "-A"))
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "-X %s\n", s.Name)
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// findStale picks, from one table's iptables-save output, the stale chains
// present and the rules that jump to them.
func findStale(table, save string) []StaleChain {
	names := staleChainNames()[table]
	var out []StaleChain
	for _, name := range names {
		if !strings.Contains(save, ":"+name+" ") {
			continue
		}
		s := StaleChain{Table: table, Name: name}
		for _, line := range strings.Split(save, "\n") {
			if strings.HasPrefix(line, "-A ") && !strings.HasPrefix(line, "-A "+name+" ") &&
				(strings.HasSuffix(line, " -j "+name) || strings.Contains(line, " -j "+name+" ")) {
				s.Jumps = append(s.Jumps, line)
			}
		}
		out = append(out, s)
	}
	return out
}

// RestoreError is a failed iptables-restore, with the payload line it
// reported (0 when it named none).
type RestoreError struct {
	Command string
	Line    int
	// Rule is the payload line at Line; for a failure the nf_tables backend
	// only detects at COMMIT, it is the first rule of that table naming the
	// chain the error message names, when there is one.
	Rule    string
	Message string
	Err     error
}

func (e *RestoreError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.Command, e.Message)
	}
	return fmt.Sprintf("%s failed at line %d %q: %s", e.Command, e.Line, e.Rule, e.Message)
}

func (e *RestoreError) Unwrap() error { return e.Err }

// restoreLineRE matches how both backends report the failing line:
// "Error occurred at line: N", "COMMIT expected at line N", "line N failed".
var restoreLineRE = regexp.MustCompile(`(?:at line:? |line )(\d+)`)

// chainNameRE matches a quoted chain name in an nf_tables error, e.g.
// "Chain 'KUBE-X' does not exist" or "Couldn't load target `KUBE-X'".
var chainNameRE = regexp.MustCompile("[`'\"]([A-Za-z0-9_.-]+)'")

// newRestoreError maps the output of a failed restore back to the payload.
func newRestoreError(command string, payload []byte, stderr string, err error) *RestoreError {
	re := &RestoreError{Command: command, Message: summarize(stderr), Err: err}
	if re.Message == "" && err != nil {
		re.Message = err.Error()
	}
	m := restoreLineRE.FindStringSubmatch(stderr)
	if m == nil {
		return re
	}
	n, convErr := strconv.Atoi(m[1])
	if convErr != nil {
		return re
	}
	lines := strings.Split(strings.TrimSuffix(string(payload), "\n"), "\n")
	re.Line = n
	if n < 1 || n > len(lines) {
		re.Rule = "(past the end of the input)"
		return re
	}
	re.Rule = lines[n-1]
	if re.Rule == "COMMIT" {
		if culprit, line := blameAtCommit(lines, n, stderr); line > 0 {
			re.Line, re.Rule = line, culprit
		}
	}
	return re
}

// blameAtCommit finds, for an error reported at a COMMIT line, the first
// line of that table section mentioning the chain the message names.
func blameAtCommit(lines []string, commitLine int, stderr string) (string, int) {
	m := chainNameRE.FindStringSubmatch(stderr)
	if m == nil {
		return "", 0
	}
	start := 0
	for i := commitLine - 2; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "*") {
			start = i
			break
		}
	}
	for i := start; i < commitLine-1; i++ {
		l := lines[i]
		if strings.HasPrefix(l, "-") && slicesContainsField(l, m[1]) {
			return l, i + 1
		}
	}
	return "", 0
}

func slicesContainsField(line, word string) bool {
	for _, f := range strings.Fields(line) {
		if f == word {
			return true
		}
	}
	return false
}

// summarize keeps the lines of a restore's stderr that say what went wrong,
// dropping the usage hint.
func summarize(stderr string) string {
	var keep []string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Try `") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "; ")
}
