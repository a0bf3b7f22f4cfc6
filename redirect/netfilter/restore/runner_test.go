package restore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// scriptedExec records commands and answers with a fixed result.
type scriptedExec struct {
	calls  []string
	stdin  [][]byte
	stdout string
	err    error
}

func (s *scriptedExec) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	s.calls = append(s.calls, strings.Join(append([]string{name}, args...), " "))
	s.stdin = append(s.stdin, stdin)
	return []byte(s.stdout), s.err
}

func TestRunnerCommands(t *testing.T) {
	cases := []struct {
		fam               ipfamily.Family
		be                kernel.Backend
		wantRestore, want string
	}{
		{ipfamily.IPv4, kernel.NFT, "iptables-nft-restore --noflush --wait=5", "iptables-nft-save -t nat"},
		{ipfamily.IPv6, kernel.NFT, "ip6tables-nft-restore --noflush --wait=5", "ip6tables-nft-save -t nat"},
		{ipfamily.IPv4, kernel.Legacy, "iptables-legacy-restore --noflush --wait=5", "iptables-legacy-save -t nat"},
		{ipfamily.IPv6, kernel.Legacy, "ip6tables-legacy-restore --noflush --wait=5", "ip6tables-legacy-save -t nat"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s", tc.fam, tc.be), func(t *testing.T) {
			ex := &scriptedExec{stdout: "*nat\nCOMMIT\n"}
			r, err := NewRunner(tc.fam, tc.be, ex)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Restore(context.Background(), []byte("*nat\nCOMMIT\n")); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			save, err := r.Save(context.Background(), "nat")
			if err != nil || save != "*nat\nCOMMIT\n" {
				t.Fatalf("Save = %q, %v", save, err)
			}
			if len(ex.calls) != 2 || ex.calls[0] != tc.wantRestore || ex.calls[1] != tc.want {
				t.Errorf("ran %q, want %q then %q", ex.calls, tc.wantRestore, tc.want)
			}
			if string(ex.stdin[0]) != "*nat\nCOMMIT\n" || ex.stdin[1] != nil {
				t.Errorf("stdin %q, want the payload for the restore and nothing for the save", ex.stdin)
			}
		})
	}
}

func TestRunnerRestoreFailureIsAnError(t *testing.T) {
	ce := &kernel.CommandError{Command: "iptables-nft-restore --noflush --wait=5", ExitCode: 1,
		Stderr: "iptables-nft-restore: line 2 failed: No chain/target/match by that name.\n", Err: errors.New("exit status 1")}
	r, err := NewRunner(ipfamily.IPv4, kernel.NFT, &scriptedExec{err: ce})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Restore(context.Background(), []byte("*filter\n-A KUBE-NONE -j ACCEPT\nCOMMIT\n"))
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("Restore = %v, want a *restore.Error", err)
	}
	if re.Line != 2 || re.Rule != "-A KUBE-NONE -j ACCEPT" || re.Command != "iptables-nft-restore" || re.Stderr != ce.Stderr {
		t.Errorf("error %+v, want line 2, its rule, the command and the stderr", re)
	}
	var got *kernel.CommandError
	if !errors.As(err, &got) || got.ExitCode != 1 {
		t.Errorf("the CommandError is not reachable through the error: %v", err)
	}
}

func TestRunnerSaveFailureNamesTheTable(t *testing.T) {
	r, err := NewRunner(ipfamily.IPv6, kernel.Legacy, &scriptedExec{err: errors.New("exit status 1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Save(context.Background(), "filter"); err == nil || !strings.Contains(err.Error(), "filter table of IPv6") {
		t.Errorf("Save error = %v, want it to name the table and family", err)
	}
}

func TestNewRunnerRefusesUnknownFamilyOrBackend(t *testing.T) {
	if _, err := NewRunner("IPv5", kernel.NFT, nil); err == nil {
		t.Error("an unknown family was accepted")
	}
	if _, err := NewRunner(ipfamily.IPv4, "ebpf", nil); err == nil {
		t.Error("an unknown backend was accepted")
	}
}
