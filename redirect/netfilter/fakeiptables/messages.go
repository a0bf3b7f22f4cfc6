package fakeiptables

import (
	"fmt"
	"strings"
)

// failure is a refused restore: what iptables-nft-restore 1.8.9 prints and
// its exit code. The three shapes below are the tool's own, so that
// restore.Error reads the fake's failures as it reads the real tool's.
type failure struct {
	stderr string
	code   int
}

// parseFailure is a line the tool's parser refused (exit 2): a bad rule, an
// unknown table, a jump to a missing chain (reported at the COMMIT line).
func parseFailure(prog string, line int, msg string, bare bool) *failure {
	var b strings.Builder
	if !bare {
		fmt.Fprintf(&b, "%s v1.8.9 (nf_tables): ", prog)
	}
	fmt.Fprintf(&b, "%s\nError occurred at line: %d\nTry `%s -h' or '%s --help' for more information.\n", msg, line, prog, prog)
	return &failure{stderr: b.String(), code: 2}
}

// commandFailure is a command the tool refused when it prepared the
// table's batch (exit 1): a chain that does not exist, a rule to delete
// that is not there. msg is "" for the tool's bare "line N failed".
func commandFailure(prog string, line int, msg string) *failure {
	if msg == "" {
		return &failure{stderr: fmt.Sprintf("%s: line %d failed\n", prog, line), code: 1}
	}
	return &failure{stderr: fmt.Sprintf("%s: line %d failed: %s.\n", prog, line, msg), code: 1}
}

// kernelRefusal is one operation of a batch the kernel refused.
type kernelRefusal struct {
	line int
	text string // e.g. "CHAIN_DEL failed (Device or resource busy): chain KUBE-X"
}

// kernelFailure lists every refused operation of a batch (exit 4), as the
// tool does after the kernel rejected it.
func kernelFailure(prog string, refusals []kernelRefusal) *failure {
	var b strings.Builder
	fmt.Fprintf(&b, "%s v1.8.9 (nf_tables): \n", prog)
	for _, r := range refusals {
		fmt.Fprintf(&b, "line %d: %s\n", r.line, r.text)
	}
	return &failure{stderr: b.String(), code: 4}
}

func commitExpected(prog string, line int) *failure {
	return &failure{stderr: fmt.Sprintf("%s: COMMIT expected at line %d\n", prog, line), code: 1}
}
