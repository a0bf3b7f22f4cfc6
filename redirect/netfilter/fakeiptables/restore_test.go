package fakeiptables

import (
	"context"
	"errors"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

const prog = "iptables-nft-restore"

// usage ends what iptables-nft-restore prints for a line its parser refuses.
const usage = "Try `iptables-nft-restore -h' or 'iptables-nft-restore --help' for more information.\n"

// restoreNoflush feeds payload to f the way restore.Runner does.
func restoreNoflush(f *Fake, payload string) error {
	_, err := f.Run(context.Background(), []byte(payload), prog, "--noflush", "--wait=5")
	return err
}

// TestRestoreRefusals feeds payloads the real tool refuses; want is what
// iptables-nft-restore 1.8.9 printed for the same payload in a throwaway
// namespace (exact when the fake words it the same, else a part of it).
func TestRestoreRefusals(t *testing.T) {
	cases := []struct {
		name, payload string
		want          string
		partial       bool
		wantCode      int
		// commitsFirst: the payload's first table section comes before the
		// failure and stays committed.
		commitsFirst bool
	}{
		{
			name:    "jump to a missing chain, reported at COMMIT",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-A KUBE-A -j KUBE-MISSING\n-A KUBE-A -j ACCEPT\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): Chain 'KUBE-MISSING' does not exist\nError occurred at line: 6\n" + usage, wantCode: 2,
		},
		{
			name:    "goto a missing chain",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-A KUBE-A -g KUBE-MISSING\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): Chain 'KUBE-MISSING' does not exist\nError occurred at line: 5\n" + usage, wantCode: 2,
		},
		{
			name:    "jump to a chain declared only after the rule",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-B\n:KUBE-B - [0:0]\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): Chain 'KUBE-B' does not exist\nError occurred at line: 5\n" + usage, wantCode: 2,
		},
		{
			name:    "the first refused command wins over a later one",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-NOPE\n-A KUBE-B -j ACCEPT\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): Chain 'KUBE-NOPE' does not exist\nError occurred at line: 5\n" + usage, wantCode: 2,
		},
		{
			name:    "deleting a chain a rule jumps to",
			payload: "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-X KUBE-B\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): \nline 5: CHAIN_DEL failed (Device or resource busy): chain KUBE-B\n", wantCode: 4,
		},
		{
			name:    "deleting a chain that still has rules",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-X KUBE-A\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): \nline 4: CHAIN_DEL failed (Device or resource busy): chain KUBE-A\n", wantCode: 4,
		},
		{
			name:    "deleting a referenced chain after flushing it",
			payload: "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-F KUBE-B\n-X KUBE-B\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): \nline 6: CHAIN_DEL failed (Device or resource busy): chain KUBE-B\n", wantCode: 4,
		},
		{
			name:    "a deleted chain is gone for the rest of the table",
			payload: "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-X KUBE-B\n-A KUBE-B -j ACCEPT\nCOMMIT\n",
			want:    prog + ": line 6 failed: No chain/target/match by that name.\n", wantCode: 1,
		},
		{
			name:    "every kernel refusal is listed",
			payload: "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-X KUBE-B\n-A KUBE-A -p tcp -j REJECT\nCOMMIT\n",
			want: prog + " v1.8.9 (nf_tables): \nline 5: CHAIN_DEL failed (Device or resource busy): chain KUBE-B\n" +
				"line 6: RULE_APPEND failed (Invalid argument): rule in chain KUBE-A\n", wantCode: 4,
		},
		{
			name:    "REJECT inserted in the nat table",
			payload: "*nat\n:KUBE-A - [0:0]\n-I KUBE-A -p tcp -j REJECT\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): \nline 3: RULE_INSERT failed (Invalid argument): rule in chain KUBE-A\n", wantCode: 4,
		},
		{
			name:    "DROP in the nat table",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j DROP\nCOMMIT\n",
			want:    "The \"nat\" table is not intended for filtering, the use of DROP is therefore inhibited.", partial: true, wantCode: 2,
		},
		{
			name:    "deleting a rule that is not there",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-D KUBE-A -j RETURN\nCOMMIT\n",
			want:    prog + ": line 4 failed: Bad rule (does a matching rule exist in that chain?).\n", wantCode: 1,
		},
		{
			name:    "deleting by a number past the end",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-D KUBE-A 1\n-D KUBE-A 1\nCOMMIT\n",
			want:    prog + ": line 5 failed: Index of deletion too big.\n", wantCode: 1,
		},
		{
			name:    "inserting past the end",
			payload: "*filter\n:KUBE-A - [0:0]\n-I KUBE-A 3 -j ACCEPT\nCOMMIT\n",
			want:    prog + ": line 3 failed: Index of insertion too big.\n", wantCode: 1,
		},
		{
			name:    "creating a chain that exists",
			payload: "*filter\n:KUBE-A - [0:0]\n-N KUBE-A\nCOMMIT\n",
			want:    prog + ": line 3 failed: Chain already exists.\n", wantCode: 1,
		},
		{
			name:    "rule in an undeclared chain",
			payload: "*filter\n-A KUBE-NONE -j ACCEPT\nCOMMIT\n",
			want:    prog + ": line 2 failed: No chain/target/match by that name.\n", wantCode: 1,
		},
		{
			name:    "deleting a missing chain",
			payload: "*filter\n-X KUBE-NONE\nCOMMIT\n",
			want:    prog + ": line 2 failed: No chain/target/match by that name.\n", wantCode: 1,
		},
		{
			name:    "policy of a user chain",
			payload: "*filter\n-P FORWARD DROP\n-P KUBE-A DROP\nCOMMIT\n",
			want:    prog + ": line 3 failed: Bad built-in chain name.\n", wantCode: 1,
		},
		{
			name:    "bad policy name",
			payload: "*filter\n:INPUT BOGUS [0:0]\nCOMMIT\n",
			want:    prog + ": line 2 failed: Bad policy name.\n", wantCode: 1,
		},
		{
			name:    "missing COMMIT",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n",
			want:    prog + ": COMMIT expected at line 4\n", wantCode: 1,
		},
		{
			name:    "unknown table",
			payload: "*natt\n:KUBE-A - [0:0]\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): " + prog + ": line 1 table name 'natt' invalid\nError occurred at line: 1\n" + usage, wantCode: 2,
		},
		{
			name:    "table opened before COMMIT",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n*nat\nCOMMIT\n",
			want:    "Bad argument `*nat'\nError occurred at line: 4\n" + usage, wantCode: 2,
		},
		{
			name:    "rule outside a table",
			payload: "*filter\n:KUBE-A - [0:0]\nCOMMIT\n-A KUBE-A -j ACCEPT\n",
			want:    prog + ": line 4 failed\n", wantCode: 1, commitsFirst: true,
		},
		{
			name:    "not a command",
			payload: "*filter\n:KUBE-A - [0:0]\nbogus line\nCOMMIT\n",
			want:    "Bad argument `bogus'\nError occurred at line: 3\n" + usage, wantCode: 2,
		},
		{
			name:    "trailing word",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT extra\nCOMMIT\n",
			want:    "Bad argument `extra'\nError occurred at line: 3\n" + usage, wantCode: 2,
		},
		{
			name:    "unknown option",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -m tcp -p tcp --foo 1 -j ACCEPT\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): unknown option \"--foo\"\nError occurred at line: 3\n" + usage, wantCode: 2,
		},
		{
			name:    "target option after a verdict",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT --reject-with tcp-reset\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): unknown option \"--reject-with\"\nError occurred at line: 3\n" + usage, wantCode: 2,
		},
		{
			name:    "port missing",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -m tcp --dport -j ACCEPT\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): invalid port/service `-j' specified\nError occurred at line: 3\n" + usage, wantCode: 2,
		},
		{
			name:    "tcp match without -p tcp",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -m tcp --dport 80 -j ACCEPT\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): TCP match requires '-p tcp'\nError occurred at line: 3\n" + usage, wantCode: 2,
		},
		{
			name:    "bad address",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -s 1.2.3.4.5 -j ACCEPT\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): host/network `1.2.3.4.5' not found\nError occurred at line: 3\n" + usage, wantCode: 2,
		},
		{
			name:    "IPv6 address in an IPv4 rule",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -s fd00::1 -j ACCEPT\nCOMMIT\n",
			want:    prog + " v1.8.9 (nf_tables): host/network `fd00::1' not found\nError occurred at line: 3\n" + usage, wantCode: 2,
		},
		{
			name:    "DNAT without a destination",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j DNAT\nCOMMIT\n",
			want:    "DNAT: option \"--to-destination\" must be specified\nError occurred at line: 3\n", partial: true, wantCode: 2,
		},
		{
			name:    "a match the fake does not model",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -m owner --uid-owner 0 -j ACCEPT\nCOMMIT\n",
			want:    "Couldn't load match `owner':No such file or directory (fakeiptables models", partial: true, wantCode: 2,
		},
		{
			name:    "--dport without -m tcp, which the real tool would add",
			payload: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp --dport 80 -j ACCEPT\nCOMMIT\n",
			want:    `unknown option "--dport": write "-m tcp --dport"`, partial: true, wantCode: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := New(ipfamily.IPv4)
			if err := restoreNoflush(f, "*filter\n:KEEP - [0:0]\n-A KEEP -j ACCEPT\nCOMMIT\n"); err != nil {
				t.Fatal(err)
			}
			before := f.Save("")
			err := restoreNoflush(f, tc.payload)
			var ce *kernel.CommandError
			if !errors.As(err, &ce) {
				t.Fatalf("restore = %v, want a *kernel.CommandError", err)
			}
			if ce.ExitCode != tc.wantCode {
				t.Errorf("exit code %d, want %d", ce.ExitCode, tc.wantCode)
			}
			if tc.partial && !strings.Contains(ce.Stderr, tc.want) || !tc.partial && ce.Stderr != tc.want {
				t.Errorf("stderr\n%q\nwant %s\n%q", ce.Stderr, map[bool]string{true: "it to contain", false: ""}[tc.partial], tc.want)
			}
			if after := f.Save(""); after != before && !tc.commitsFirst {
				t.Errorf("a failed restore changed the tables:\n%s", after)
			}
			if tc.commitsFirst && !f.HasChain("filter", "KUBE-A") {
				t.Errorf("the section before the failure was not committed:\n%s", f.Save(""))
			}
			recs := f.Restores()
			if last := recs[len(recs)-1]; last.Payload != tc.payload || last.ExitCode != tc.wantCode || last.Stderr != ce.Stderr {
				t.Errorf("the restore was recorded as %+v", last)
			}
		})
	}
}

func TestRestoreKeepsTablesCommittedBeforeTheFailingOne(t *testing.T) {
	f := New(ipfamily.IPv4)
	err := restoreNoflush(f, "*nat\n:KUBE-A - [0:0]\nCOMMIT\n*filter\n:KUBE-B - [0:0]\n-A KUBE-B -j ACCEPT\n-A KUBE-B -j KUBE-NOPE\nCOMMIT\n*raw\n:KUBE-C - [0:0]\nCOMMIT\n")
	if err == nil {
		t.Fatal("restore succeeded")
	}
	if !f.HasChain("nat", "KUBE-A") || f.HasChain("filter", "KUBE-B") || f.HasChain("raw", "KUBE-C") {
		t.Errorf("want nat committed, filter and raw untouched:\n%s", f.Save(""))
	}
}

func TestRestoreSemantics(t *testing.T) {
	base := "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j RETURN\n-A OUTPUT -j KUBE-B\nCOMMIT\n" +
		"*filter\n:KUBE-F - [0:0]\n-A INPUT -j KUBE-F\nCOMMIT\n"
	cases := []struct {
		name    string
		payload string
		flags   []string
		want    string // Save("") after base and payload
	}{
		{
			name:    "declaring under --noflush empties only the declared chain",
			payload: "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -j ACCEPT\nCOMMIT\n",
			flags:   []string{"--noflush"},
			want: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-F - [0:0]\n-A INPUT -j KUBE-F\nCOMMIT\n" +
				"*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n" +
				"-A OUTPUT -j KUBE-B\n-A KUBE-A -p tcp -j ACCEPT\nCOMMIT\n",
		},
		{
			// What iptables-nft-restore and iptables-legacy-restore did with
			// the same two payloads.
			name:    "without --noflush every named table starts empty; -I, -Z and policies",
			payload: "*nat\n:KUBE-C - [0:0]\n-A KUBE-C -j RETURN\n-Z\n-Z KUBE-C\n-I KUBE-C -j ACCEPT\n-I KUBE-C 3 -p tcp -j ACCEPT\nCOMMIT\n*filter\n:FORWARD DROP [5:6]\nCOMMIT\n",
			want: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n" +
				"*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-C - [0:0]\n" +
				"-A KUBE-C -j ACCEPT\n-A KUBE-C -j RETURN\n-A KUBE-C -p tcp -j ACCEPT\nCOMMIT\n",
		},
		{
			name:    "without --noflush a table the payload does not name is kept",
			payload: "*filter\n:KUBE-G - [0:0]\nCOMMIT\n",
			want: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-G - [0:0]\nCOMMIT\n" +
				"*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n" +
				"-A OUTPUT -j KUBE-B\n-A KUBE-A -j RETURN\nCOMMIT\n",
		},
		{
			// The stale-chain removal a full sync does: unhook, flush, delete.
			name:    "a chain can go once nothing jumps to it",
			payload: "*nat\n:KUBE-B - [0:0]\n-D OUTPUT -j KUBE-B\n-X KUBE-B\n-N KUBE-D\n-A KUBE-A -j KUBE-D\n-D KUBE-A 1\nCOMMIT\n",
			flags:   []string{"--noflush"},
			want: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-F - [0:0]\n-A INPUT -j KUBE-F\nCOMMIT\n" +
				"*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-A - [0:0]\n:KUBE-D - [0:0]\n" +
				"-A KUBE-A -j KUBE-D\nCOMMIT\n",
		},
		{
			name:    "comments are stored quoted the way iptables-save quotes them",
			payload: "*filter\n:KUBE-F - [0:0]\n-A KUBE-F -m comment --comment \"web\" -j ACCEPT\n-A KUBE-F -m comment --comment ns/web:http -j ACCEPT\n-A KUBE-F -m comment --comment \"it's \\\"x\\\"\" -j ACCEPT\n-D KUBE-F -m comment --comment web -j ACCEPT\n-A KUBE-F -m comment --comment web -j ACCEPT\nCOMMIT\n",
			flags:   []string{"-n", "-w", "5", "--counters"},
			want: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-F - [0:0]\n-A INPUT -j KUBE-F\n" +
				"-A KUBE-F -m comment --comment \"ns/web:http\" -j ACCEPT\n-A KUBE-F -m comment --comment \"it\\'s \\\"x\\\"\" -j ACCEPT\n-A KUBE-F -m comment --comment web -j ACCEPT\nCOMMIT\n" +
				"*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n" +
				"-A OUTPUT -j KUBE-B\n-A KUBE-A -j RETURN\nCOMMIT\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := New(ipfamily.IPv4)
			if err := restoreNoflush(f, base); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Run(context.Background(), []byte(tc.payload), prog, tc.flags...); err != nil {
				t.Fatal(err)
			}
			if got := f.Save(""); got != tc.want {
				t.Errorf("tables:\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestFailNextRestore(t *testing.T) {
	f := New(ipfamily.IPv4)
	f.FailNextRestore("iptables-nft-restore: line 1 failed: Resource temporarily unavailable.\n")
	f.FailNextRestore("second\n")
	payload := "*nat\n:KUBE-A - [0:0]\nCOMMIT\n"
	for _, want := range []string{"Resource temporarily unavailable", "second"} {
		var ce *kernel.CommandError
		if err := restoreNoflush(f, payload); !errors.As(err, &ce) || !strings.Contains(ce.Stderr, want) || ce.ExitCode != 1 {
			t.Fatalf("restore = %v, want the injected failure %q", err, want)
		}
		if f.HasChain("nat", "KUBE-A") {
			t.Fatal("an injected failure applied the payload")
		}
	}
	if err := restoreNoflush(f, payload); err != nil || !f.HasChain("nat", "KUBE-A") {
		t.Fatalf("the third restore: %v; want it applied", err)
	}
	recs := f.Restores()
	if len(recs) != 3 || recs[0].ExitCode != 1 || recs[2].ExitCode != 0 || strings.Join(recs[2].Command, " ") != prog+" --noflush --wait=5" {
		t.Errorf("recorded %+v, want three restores, two failed", recs)
	}
}

func TestRunRefusals(t *testing.T) {
	cases := []struct {
		name    string
		fam     ipfamily.Family
		command []string
		want    string
	}{
		{"other family's binary", ipfamily.IPv4, []string{"ip6tables-nft-restore", "--noflush"}, "the IPv4 fake cannot run ip6tables-nft-restore"},
		{"other family's save", ipfamily.IPv6, []string{"iptables-legacy-save"}, "the IPv6 fake cannot run iptables-legacy-save"},
		{"unknown restore flag", ipfamily.IPv4, []string{"iptables-nft-restore", "--bogus"}, "iptables-nft-restore: unrecognized option '--bogus'"},
		{"unknown table", ipfamily.IPv4, []string{"iptables-nft-save", "-t", "natt"}, "Table `natt' does not exist"},
		{"not iptables", ipfamily.IPv4, []string{"ipset", "list"}, "unknown command ipset"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.fam).Run(context.Background(), nil, tc.command[0], tc.command[1:]...)
			var ce *kernel.CommandError
			if !errors.As(err, &ce) || !strings.Contains(ce.Stderr, tc.want) {
				t.Errorf("Run = %v, want a CommandError saying %q", err, tc.want)
			}
		})
	}
}
