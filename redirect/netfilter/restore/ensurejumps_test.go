package restore_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// countingRunner counts the commands it passes on to the fake.
type countingRunner struct {
	*fakeiptables.Fake
	commands []string
}

func (c *countingRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	c.commands = append(c.commands, strings.Join(append([]string{name}, args...), " "))
	return c.Fake.Run(ctx, stdin, name, args...)
}

func TestEnsureJumps(t *testing.T) {
	jumps := []restore.Jump{
		{Table: "nat", Chain: "PREROUTING", First: true, Args: []string{"-m", "comment", "--comment", "portals, first", "-j", "KUBE-A"}},
		{Table: "nat", Chain: "PREROUTING", First: true, Args: []string{"-j", "KUBE-B"}},
		{Table: "nat", Chain: "PREROUTING", Args: []string{"-m", "addrtype", "--dst-type", "LOCAL", "-j", "KUBE-LAST"}},
		{Table: "filter", Chain: "INPUT", Args: []string{"-m", "conntrack", "--ctstate", "NEW", "-j", "KUBE-F"}},
	}
	const chains = "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n:KUBE-LAST - [0:0]\n:OTHER - [0:0]\n-A PREROUTING -j OTHER\nCOMMIT\n" +
		"*filter\n:KUBE-F - [0:0]\nCOMMIT\n"
	wantNAT := []string{
		"-A PREROUTING -j KUBE-B",
		`-A PREROUTING -m comment --comment "portals, first" -j KUBE-A`,
		"-A PREROUTING -j OTHER",
		"-A PREROUTING -m addrtype --dst-type LOCAL -j KUBE-LAST",
	}
	cases := []struct {
		name string
		// before: what the node holds first (a restore --noflush), after
		// the chains.
		before    string
		wantAdded []string // targets
		// wantCommands: the saves, and a restore only when something is
		// missing.
		wantCommands int
		wantErr      string
		wantNAT      []string
	}{
		{
			name:      "all missing: one restore adds them, the last First one on top",
			wantAdded: []string{"KUBE-A", "KUBE-B", "KUBE-LAST", "KUBE-F"}, wantCommands: 3, wantNAT: wantNAT,
		},
		{
			name: "all present: only read",
			before: "*nat\n-I PREROUTING 1 -m comment --comment \"portals, first\" -j KUBE-A\n-I PREROUTING 1 -j KUBE-B\n" +
				"-A PREROUTING -m addrtype --dst-type LOCAL -j KUBE-LAST\nCOMMIT\n*filter\n-A INPUT -m conntrack --ctstate NEW -j KUBE-F\nCOMMIT\n",
			wantCommands: 2, wantNAT: wantNAT,
		},
		{
			name:      "some present: the others added",
			before:    "*filter\n-A INPUT -m conntrack --ctstate NEW -j KUBE-F\nCOMMIT\n",
			wantAdded: []string{"KUBE-A", "KUBE-B", "KUBE-LAST"}, wantCommands: 3, wantNAT: wantNAT,
		},
		{
			name: "a jump the kernel refuses: the error names it, its table is unchanged",
			// KUBE-F is gone: the filter table refuses the jump, after
			// the nat table committed its own.
			before:       "*filter\n-X KUBE-F\nCOMMIT\n",
			wantCommands: 3, wantErr: "adding the jump rules nat/PREROUTING -> KUBE-A, nat/PREROUTING -> KUBE-B, nat/PREROUTING -> KUBE-LAST, filter/INPUT -> KUBE-F",
			wantNAT: wantNAT,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fake := fakeiptables.New(ipfamily.IPv4)
			for _, payload := range []string{chains, tc.before} {
				if payload == "" {
					continue
				}
				if _, err := fake.Run(ctx, []byte(payload), "iptables-nft-restore", "--noflush"); err != nil {
					t.Fatalf("setting up: %v", err)
				}
			}
			counting := &countingRunner{Fake: fake}
			r, err := restore.NewRunner(ipfamily.IPv4, kernel.NFT, counting)
			if err != nil {
				t.Fatal(err)
			}
			added, err := r.EnsureJumps(ctx, jumps)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("EnsureJumps error = %v, want %q", err, tc.wantErr)
			}
			var targets []string
			for _, j := range added {
				targets = append(targets, j.Target())
			}
			if !slices.Equal(targets, tc.wantAdded) {
				t.Errorf("added %v, want %v", targets, tc.wantAdded)
			}
			if len(counting.commands) != tc.wantCommands {
				t.Errorf("ran %d commands, want %d: %q", len(counting.commands), tc.wantCommands, counting.commands)
			}
			var nat []string
			for _, line := range strings.Split(fake.Save("nat"), "\n") {
				if strings.HasPrefix(line, "-A PREROUTING ") {
					nat = append(nat, line)
				}
			}
			if !slices.Equal(nat, tc.wantNAT) {
				t.Errorf("nat PREROUTING:\n%s\nwant:\n%s", strings.Join(nat, "\n"), strings.Join(tc.wantNAT, "\n"))
			}
			// A second call finds every jump it could add in place.
			if tc.wantErr == "" {
				if again, err := r.EnsureJumps(ctx, jumps); err != nil || len(again) > 0 {
					t.Errorf("second EnsureJumps added %v (error %v), want nothing", again, err)
				}
			}
		})
	}
}
