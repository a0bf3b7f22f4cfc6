package syncscale

import (
	"encoding/binary"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestNATVersion checks that each backend's version moves with a restore
// of the nat table, and only then.
func TestNATVersion(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for _, b := range kernel.Backends() {
		t.Run(string(b), func(t *testing.T) {
			restore := func(payload string) {
				t.Helper()
				cmd := exec.Command(b.RestoreCommand(ipfamily.IPv4), "--noflush")
				cmd.Stdin = strings.NewReader(payload)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s: %v\n%s", b.RestoreCommand(ipfamily.IPv4), err, out)
				}
			}
			restore("*nat\n:KUBE-SVC-A - [0:0]\nCOMMIT\n")
			v, err := OpenNATVersion(b)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			read := func() string {
				t.Helper()
				s, err := v.Read()
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			before := read()
			if again := read(); again != before {
				t.Fatalf("version moved without a change: %q, then %q", before, again)
			}
			restore("*nat\n:KUBE-SEP-A1 - [0:0]\n-A KUBE-SVC-A -j KUBE-SEP-A1\nCOMMIT\n")
			after := read()
			if after == before {
				t.Errorf("version stayed %q across a restore adding a rule", before)
			}
			if again := read(); again != after {
				t.Errorf("version moved without a change: %q, then %q", after, again)
			}
		})
	}
}

func TestParseGeneration(t *testing.T) {
	nfgen := []byte{0, 0, 0, 7} // family, version, res_id
	attr := func(typ uint16, value ...byte) []byte {
		a := binary.NativeEndian.AppendUint16(nil, uint16(4+len(value)))
		a = binary.NativeEndian.AppendUint16(a, typ)
		a = append(a, value...)
		for len(a)%4 != 0 {
			a = append(a, 0)
		}
		return a
	}
	tests := []struct {
		name    string
		body    []byte
		want    string
		wantErr bool
	}{
		{"id after the process name", slices.Concat(nfgen, attr(unix.NFTA_GEN_PROC_NAME, 'n', 'f', 't', 0, 0), attr(unix.NFTA_GEN_ID, 0, 0, 1, 2)), "generation 258", false},
		{"no id", slices.Concat(nfgen, attr(unix.NFTA_GEN_PROC_PID, 0, 0, 0, 9)), "", true},
		{"truncated attribute", slices.Concat(nfgen, []byte{40, 0, 1, 0, 0}), "", true},
		{"too short", []byte{0, 0}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseGeneration(tt.body)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseGeneration = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
