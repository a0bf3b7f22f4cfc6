package cleanup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/mode"
)

// render joins plans into one text for golden comparison.
func render(plans []TableRestore) string {
	var b strings.Builder
	for _, p := range plans {
		b.WriteString("# table " + p.Table + "\n" + p.Input)
	}
	return b.String()
}

func TestPlanGolden(t *testing.T) {
	cases := []struct {
		save string
		keep mode.Name
		// golden names the expected restore input; "" means nothing to do.
		golden string
	}{
		{"iptables-mode.save", "", "iptables-mode.all.restore"},
		{"iptables-mode.save", mode.IPTables, ""},
		{"iptables-mode.save", mode.IPVS, "iptables-mode.keep-ipvs.restore"},
		{"iptables-mode.save", mode.Userspace, "iptables-mode.all.restore"},
		{"ipvs-mode.save", "", "ipvs-mode.all.restore"},
		{"ipvs-mode.save", mode.IPTables, "ipvs-mode.keep-iptables.restore"},
		{"ipvs-mode.save", mode.IPVS, ""},
		{"userspace-mode.save", "", "userspace-mode.all.restore"},
		{"userspace-mode.save", mode.IPTables, "userspace-mode.all.restore"},
		{"userspace-mode.save", mode.Userspace, ""},
		{"ipv6-iptables-mode.save", "", "ipv6-iptables-mode.all.restore"},
		{"ipv6-iptables-mode.save", mode.IPVS, "ipv6-iptables-mode.keep-ipvs.restore"},
		{"kubelet-only.save", "", ""},
	}
	for _, c := range cases {
		t.Run(c.save+"/keep="+string(c.keep), func(t *testing.T) {
			save, err := os.ReadFile(filepath.Join("testdata", c.save))
			if err != nil {
				t.Fatal(err)
			}
			plans, err := Plan(string(save), keeping(c.keep))
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			got := render(plans)
			if c.golden == "" {
				if got != "" {
					t.Fatalf("want nothing to restore, got:\n%s", got)
				}
				return
			}
			testkit.Golden(t, filepath.Join("testdata", c.golden), got)
		})
	}
}

// TestPlanKeepsWhatIsNotOwned checks the survivors directly, independent of
// the golden files: no line of any plan may name kubelet's chains or the
// unrelated rules in the fixtures.
func TestPlanKeepsWhatIsNotOwned(t *testing.T) {
	survivors := []string{
		"KUBE-KUBELET-CANARY", "KUBE-MARK-DROP", "KUBE-IPTABLES-HINT", // kubelet's
		"USER-V6", "--dport 2222", "198.19.5.0/24", "198.19.9.0/24", // users'
	}
	for _, name := range []string{"iptables-mode.save", "ipvs-mode.save", "userspace-mode.save", "ipv6-iptables-mode.save", "kubelet-only.save"} {
		save, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, keep := range []mode.Name{"", mode.IPTables, mode.IPVS, mode.Userspace} {
			plans, err := Plan(string(save), keeping(keep))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range plans {
				for _, line := range strings.Split(p.Input, "\n") {
					for _, s := range survivors {
						if strings.Contains(line, s) {
							t.Errorf("%s keep=%q: plan for table %s touches %q: %s", name, keep, p.Table, s, line)
						}
					}
					// filter's KUBE-FIREWALL is kubelet's (nat's was ipvs mode's).
					if p.Table == "filter" && strings.Contains(line, "KUBE-FIREWALL") {
						t.Errorf("%s keep=%q: plan touches kubelet's filter KUBE-FIREWALL: %s", name, keep, line)
					}
				}
			}
		}
	}
}

// What restore.ParseSave refuses is tested there; Plan passes it on, and
// refuses a rule it cannot split.
func TestPlanRejectsMalformedSave(t *testing.T) {
	for name, save := range map[string]string{
		"missing COMMIT":     "*nat\n:KUBE-SERVICES - [0:0]\n",
		"unterminated quote": "*nat\n-A OUTPUT -m comment --comment \"oops -j KUBE-SERVICES\nCOMMIT\n",
	} {
		if _, err := Plan(save, keeping("")); err == nil {
			t.Errorf("%s: Plan accepted %q", name, save)
		}
	}
}

func TestRemoveSet(t *testing.T) {
	for _, c := range []struct {
		name string
		keep mode.Name
		want bool
	}{
		{"KUBE-CLUSTER-IP", "", true},
		{"KUBE-6-CLUSTER-IP", "", true},
		{"KUBE-NODE-PORT-LOCAL-SCTP-HASH", mode.IPTables, true},
		{"KUBE-6-LOAD-BALANCER-SOURCE-CIDR", mode.Userspace, true},
		{"KUBE-CLUSTER-IP", mode.IPVS, false},
		{"KPROXY-PROBE", mode.IPVS, true},
		{"my-allowlist", "", false},
		{"KUBE-SOMETHING-ELSE", "", false},
	} {
		if got := keeping(c.keep).resolve().removeSet(c.name); got != c.want {
			t.Errorf("removeSet(%q, keep=%q) = %t, want %t", c.name, c.keep, got, c.want)
		}
	}
}
