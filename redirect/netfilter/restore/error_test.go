package restore

import (
	"errors"
	"strings"
	"testing"
)

// The stderr texts below are what iptables 1.8.9 printed for these failures
// (captured in a throwaway network namespace).
func TestErrorNamesTheFailingLine(t *testing.T) {
	payload := []byte("*nat\n" + // 1
		":KUBE-A - [0:0]\n" + // 2
		":KUBE-B - [0:0]\n" + // 3
		"-A KUBE-A -p tcp -j ACCEPT\n" + // 4
		"-A KUBE-A -m comment --comment \"to KUBE-GONE\" -j KUBE-B\n" + // 5
		"-A KUBE-A -p tcp -j KUBE-GONE\n" + // 6
		"-X KUBE-B\n" + // 7
		"COMMIT\n") // 8
	cases := []struct {
		name         string
		stderr       string
		wantLine     int
		wantRule     string
		wantReported int
		wantMessage  string
	}{
		{
			name: "legacy names the rule jumping to a missing chain",
			stderr: "iptables-restore v1.8.9 (legacy): Couldn't load target `KUBE-GONE':No such file or directory\n\n" +
				"Error occurred at line: 6\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n",
			wantLine: 6, wantRule: "-A KUBE-A -p tcp -j KUBE-GONE",
			wantMessage: "Couldn't load target `KUBE-GONE':No such file or directory",
		},
		{
			// nft blames the COMMIT; the first rule jumping to the chain is
			// at fault, not line 5, which only mentions it in a comment.
			name: "nft reports a missing chain at COMMIT",
			stderr: "iptables-nft-restore v1.8.9 (nf_tables): Chain 'KUBE-GONE' does not exist\nError occurred at line: 8\n" +
				"Try `iptables-nft-restore -h' or 'iptables-nft-restore --help' for more information.\n",
			wantLine: 6, wantRule: "-A KUBE-A -p tcp -j KUBE-GONE", wantReported: 8,
			wantMessage: "Chain 'KUBE-GONE' does not exist",
		},
		{
			name:     "nft kernel refusals name their own lines; the first is taken",
			stderr:   "iptables-nft-restore v1.8.9 (nf_tables): \nline 7: CHAIN_DEL failed (Device or resource busy): chain KUBE-B\nline 8: RULE_APPEND failed (Invalid argument): rule in chain KUBE-A\n",
			wantLine: 7, wantRule: "-X KUBE-B",
			wantMessage: "line 7: CHAIN_DEL failed (Device or resource busy): chain KUBE-B; line 8: RULE_APPEND failed (Invalid argument): rule in chain KUBE-A",
		},
		{
			name:     "nft command refusal",
			stderr:   "iptables-nft-restore: line 4 failed: No chain/target/match by that name.\n",
			wantLine: 4, wantRule: "-A KUBE-A -p tcp -j ACCEPT",
			wantMessage: "line 4 failed: No chain/target/match by that name.",
		},
		{
			name:     "legacy command refusal",
			stderr:   "iptables-restore: line 7 failed\n",
			wantLine: 7, wantRule: "-X KUBE-B", wantMessage: "line 7 failed",
		},
		{
			// legacy finds a bad target only when the kernel refuses the
			// table, and names no chain: the COMMIT it is.
			name:     "legacy kernel refusal at COMMIT without a chain name",
			stderr:   "iptables-restore: line 8 failed\n",
			wantLine: 8, wantRule: "COMMIT", wantMessage: "line 8 failed",
		},
		{
			name:     "missing COMMIT points past the end",
			stderr:   "iptables-nft-restore: COMMIT expected at line 9\n",
			wantLine: 9, wantRule: pastTheEnd, wantMessage: "COMMIT expected at line 9",
		},
		{
			name:     "bare parser complaint",
			stderr:   "Bad argument `bogus'\nError occurred at line: 4\nTry `iptables-nft-restore -h' or 'iptables-nft-restore --help' for more information.\n",
			wantLine: 4, wantRule: "-A KUBE-A -p tcp -j ACCEPT", wantMessage: "Bad argument `bogus'",
		},
		{
			name:        "no line named",
			stderr:      "Another app is currently holding the xtables lock. Stopped waiting after 5s.\n",
			wantLine:    0,
			wantMessage: "Another app is currently holding the xtables lock. Stopped waiting after 5s.",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cause := errors.New("exit status 2")
			e := newError("iptables-nft-restore", payload, tc.stderr, cause)
			if e.Line != tc.wantLine || e.Rule != tc.wantRule || e.ReportedLine != tc.wantReported {
				t.Errorf("line %d rule %q reported %d, want line %d rule %q reported %d",
					e.Line, e.Rule, e.ReportedLine, tc.wantLine, tc.wantRule, tc.wantReported)
			}
			if e.Message != tc.wantMessage {
				t.Errorf("message %q, want %q", e.Message, tc.wantMessage)
			}
			if e.Stderr != tc.stderr {
				t.Errorf("stderr not kept whole: %q", e.Stderr)
			}
			if !errors.Is(e, cause) {
				t.Error("the command's error is not wrapped")
			}
			msg := e.Error()
			if !strings.HasPrefix(msg, "iptables-nft-restore") || strings.Contains(msg, "Try `") {
				t.Errorf("Error() = %q: want the command first and no usage hint", msg)
			}
			if tc.wantRule != "" && !strings.Contains(msg, tc.wantRule) {
				t.Errorf("Error() = %q does not quote the rule %q", msg, tc.wantRule)
			}
		})
	}
}

func TestErrorWithoutStderrUsesTheCommandError(t *testing.T) {
	e := newError("iptables-nft-restore", nil, "", errors.New(`exec: "iptables-nft-restore": executable file not found in $PATH`))
	if e.Line != 0 || !strings.Contains(e.Error(), "executable file not found") {
		t.Errorf("Error() = %q, want the exec failure", e.Error())
	}
}

func TestBlameAtCommitStaysInsideTheFailingTable(t *testing.T) {
	// The chain is named in the filter section, but nat's COMMIT is blamed:
	// no nat rule names it, so the COMMIT line stands.
	payload := []byte("*filter\n:KUBE-X - [0:0]\n-A KUBE-X -j KUBE-GONE\nCOMMIT\n*nat\n:KUBE-A - [0:0]\nCOMMIT\n")
	e := newError("iptables-nft-restore", payload, "iptables-nft-restore v1.8.9 (nf_tables): Chain 'KUBE-GONE' does not exist\nError occurred at line: 7\n", nil)
	if e.Line != 7 || e.Rule != "COMMIT" || e.ReportedLine != 0 {
		t.Errorf("line %d rule %q reported %d, want the COMMIT on line 7", e.Line, e.Rule, e.ReportedLine)
	}
}
