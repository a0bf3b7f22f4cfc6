package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"kproxy.dev/kproxy/bench/lab"
)

// TestHelpNamesEveryMode: wherever kproxy's --help speaks of the proxy
// modes (the overview, --proxy-mode, --cleanup), it names all four, so
// nftables is not missing from the list an operator reads.
func TestHelpNamesEveryMode(t *testing.T) {
	out, err := exec.Command(lab.KproxyBinary(t), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("kproxy --help: %v\n%s", err, out)
	}
	help := string(out)
	overview, _, _ := strings.Cut(help, "Usage:")
	tests := []struct {
		name string
		text string
	}{
		{"overview", overview},
		{"--proxy-mode", flagHelp(t, help, "proxy-mode")},
		{"--cleanup", flagHelp(t, help, "cleanup")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []string{"userspace", "iptables", "ipvs", "nftables"} {
				if !regexp.MustCompile(`\b` + mode + `\b`).MatchString(tc.text) {
					t.Errorf("the %s help does not name the %s mode:\n%s", tc.name, mode, tc.text)
				}
			}
		})
	}
}

// flagHelp returns the --help line (with its continuation lines) of a flag.
func flagHelp(t *testing.T, help, flag string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s+--` + regexp.QuoteMeta(flag) + `\b.*(\n\s{20,}\S.*)*`)
	m := re.FindString(help)
	if m == "" {
		t.Fatalf("--help lists no --%s:\n%s", flag, help)
	}
	return m
}

// TestVersionFlagParity runs kube-proxy v1.36 and kproxy with each form of
// --version (component-base's verflag: true, raw, false, vX.Y.Z to set the
// reported version) and checks that both accept or refuse it alike and
// print the same kind of answer. {base} stands for each binary's own
// version: the one --version=vX.Y.Z must keep major, minor and patch of.
func TestVersionFlagParity(t *testing.T) {
	dir := t.TempDir()
	proxies := []struct {
		name, bin string
		prefix    string // --version's output before the version
	}{
		{"kube-proxy", lab.KubeProxyBinary(t), "Kubernetes "},
		{"kproxy", lab.KproxyBinary(t), "kproxy version "},
	}
	tests := []struct {
		name string
		args []string
		// want is what is printed: "version" (the prefix and the
		// version), "raw" (version.Info), "config" (the configuration
		// written: the flag did nothing) or "refused".
		want string
		// version is the version printed, {base} for the built one.
		version string
		// mention must be in the output of both.
		mention string
	}{
		{name: "bare", args: []string{"--version"}, want: "version", version: "{base}"},
		{name: "true", args: []string{"--version=true"}, want: "version", version: "{base}"},
		{name: "raw", args: []string{"--version=raw"}, want: "raw", version: "{base}"},
		{name: "false", args: []string{"--version=false"}, want: "config"},
		{name: "set, then print", args: []string{"--version={base}-custom.1", "--version"}, want: "version", version: "{base}-custom.1"},
		{name: "set, then raw", args: []string{"--version={base}-custom.1", "--version=raw"}, want: "raw", version: "{base}-custom.1"},
		{name: "set only", args: []string{"--version={base}-custom.1"}, want: "config"},
		{name: "print, then set", args: []string{"--version", "--version={base}-custom.1"}, want: "config"},
		{name: "another release", args: []string{"--version=v9.9.9"}, want: "refused", mention: "must match major/minor/patch of default version"},
		{name: "not a version", args: []string{"--version=v1.x"}, want: "refused", mention: `"v1.x"`},
		{name: "not a boolean", args: []string{"--version=bogus"}, want: "refused", mention: `strconv.ParseBool: parsing "bogus": invalid syntax`},
	}
	for _, p := range proxies {
		out, err := exec.Command(p.bin, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", p.name, err)
		}
		base, ok := strings.CutPrefix(strings.TrimSpace(string(out)), p.prefix)
		if !ok {
			t.Fatalf("%s --version printed %q, want %q and the version", p.name, out, p.prefix)
		}
		v, err := utilversion.ParseSemantic(strings.Fields(base)[0])
		if err != nil {
			t.Fatalf("%s --version: %v", p.name, err)
		}
		base = fmt.Sprintf("v%d.%d.%d", v.Major(), v.Minor(), v.Patch())
		built := strings.Fields(strings.TrimSpace(string(out)))[len(strings.Fields(p.prefix))]
		for _, tc := range tests {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				written := filepath.Join(dir, p.name+".yaml")
				_ = os.Remove(written)
				args := []string{"--hostname-override=n1", "--write-config-to=" + written}
				for _, a := range tc.args {
					args = append(args, strings.ReplaceAll(a, "{base}", base))
				}
				out, err := exec.Command(p.bin, args...).CombinedOutput()
				code := exitCode(err)
				output := strings.TrimSpace(string(out))
				want := strings.ReplaceAll(strings.ReplaceAll(tc.version, "{base}-", base+"-"), "{base}", built)
				switch tc.want {
				case "version":
					if code != 0 || !strings.HasPrefix(output, p.prefix+want) || strings.Contains(output, "\n") {
						t.Errorf("%s %q: exit %d, printed %q; want exit 0 and %q", p.name, args, code, output, p.prefix+want)
					}
				case "raw":
					if code != 0 || !strings.HasPrefix(output, "version.Info{Major:") || !strings.Contains(output, `GitVersion:"`+want+`"`) {
						t.Errorf("%s %q: exit %d, printed %q; want exit 0 and version.Info{...GitVersion:%q...}", p.name, args, code, output, want)
					}
				case "config":
					if _, err := os.Stat(written); code != 0 || err != nil {
						t.Errorf("%s %q: exit %d, no configuration written (%v):\n%s", p.name, args, code, err, output)
					}
				case "refused":
					if code != 1 || !strings.Contains(output, tc.mention) {
						t.Errorf("%s %q: exit %d, want 1 and a message with %q:\n%s", p.name, args, code, tc.mention, output)
					}
				}
			})
		}
	}
}

// flagLineRE is a -v=1 FLAG line of klog's text format.
var flagLineRE = regexp.MustCompile(`(?m)^I\d{4} [^]]*\] FLAG: --([a-z0-9-]+)=(".*")$`)

// TestFlagLinesParity: at -v=1 kube-proxy v1.36 and kproxy log one
// `FLAG: --name="value"` line per flag, and none at -v=0. Every
// kube-proxy flag is among kproxy's lines with the same value, but for an
// unset --proxy-mode (kube-proxy: its default, iptables; kproxy: "",
// picking iptables or userspace at start) and the file each writes.
func TestFlagLinesParity(t *testing.T) {
	kubeProxy := lab.KubeProxyBinary(t)
	kproxy := lab.KproxyBinary(t)
	dir := t.TempDir()
	tests := []struct {
		name  string
		args  []string
		lines bool
	}{
		{name: "-v=0", args: []string{"--hostname-override=n1"}},
		{name: "-v=1", args: []string{"--hostname-override=n1", "-v=1"}, lines: true},
		{name: "-v=1 with flags", args: []string{"--hostname-override=n1", "--v=1", "--proxy-mode=ipvs", "--nodeport-addresses=10.0.0.0/8,fd00::/64", "--feature-gates=AllBeta=false", "--cluster-cidr=10.1.0.0/16"}, lines: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flags := map[string]map[string]string{}
			for _, p := range []struct{ name, bin string }{{"kube-proxy", kubeProxy}, {"kproxy", kproxy}} {
				args := append([]string{"--write-config-to=" + filepath.Join(dir, "config.yaml")}, tc.args...)
				out, err := exec.Command(p.bin, args...).CombinedOutput()
				if err != nil {
					t.Fatalf("%s %q: %v\n%s", p.name, args, err, out)
				}
				lines := flagLineRE.FindAllStringSubmatch(string(out), -1)
				if got := strings.Count(string(out), "FLAG: --"); got != len(lines) {
					t.Errorf("%s: %d FLAG lines, %d of them in klog's form:\n%s", p.name, got, len(lines), out)
				}
				flags[p.name] = map[string]string{}
				for _, m := range lines {
					flags[p.name][m[1]] = m[2]
				}
			}
			kp, k := flags["kube-proxy"], flags["kproxy"]
			if !tc.lines {
				if len(kp)+len(k) > 0 {
					t.Errorf("FLAG lines at -v=0: kube-proxy %d, kproxy %d", len(kp), len(k))
				}
				return
			}
			if len(kp) == 0 {
				t.Fatal("kube-proxy logged no FLAG lines (has kube-proxy changed?)")
			}
			if kp["proxy-mode"] == `"iptables"` && k["proxy-mode"] == `""` {
				k["proxy-mode"] = kp["proxy-mode"]
			}
			for name, want := range kp {
				if got, ok := k[name]; !ok {
					t.Errorf("kproxy logs no FLAG line for --%s (kube-proxy: %s)", name, want)
				} else if got != want {
					t.Errorf("FLAG: --%s=%s in kproxy, =%s in kube-proxy", name, got, want)
				}
			}
		})
	}
}

// TestNodePortAddressesUnsetWarning runs kproxy --init-only in a fresh
// network namespace and checks that it logs kube-proxy v1.36's error-level
// warning (checkBadConfig in cmd/kube-proxy/app/server.go, same text) when
// NodePorts are open on every local IP, and not when nodePortAddresses
// limits them. kube-proxy itself reaches that check only once it has read
// its Node from an API server.
func TestNodePortAddressesUnsetWarning(t *testing.T) {
	bin := inNetnsWithBinary(t)
	if bin == "" {
		return
	}
	const warning = `] "Kube-proxy configuration may be incomplete or incorrect" err="nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using ` + "`--nodeport-addresses primary`" + `"`
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nhostnameOverride: n1\nmode: iptables\nnodePortAddresses: [127.0.0.0/8]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want bool
	}{
		{name: "unset", args: []string{"--hostname-override=n1", "--proxy-mode=iptables"}, want: true},
		{name: "primary", args: []string{"--hostname-override=n1", "--proxy-mode=iptables", "--nodeport-addresses=primary"}},
		{name: "CIDRs", args: []string{"--hostname-override=n1", "--proxy-mode=iptables", "--nodeport-addresses=10.0.0.0/8"}},
		{name: "set in the file", args: []string{"--config=" + config}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--init-only"}, tc.args...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("kproxy %q: %v\n%s", args, err, out)
			}
			var found bool
			for line := range strings.SplitSeq(string(out), "\n") {
				if strings.HasSuffix(line, warning) {
					found = true
					if !strings.HasPrefix(line, "E") {
						t.Errorf("the warning is not logged as an error:\n%s", line)
					}
				}
			}
			if found != tc.want {
				t.Errorf("kproxy %q logged the nodePortAddresses warning: %t, want %t:\n%s", args, found, tc.want, out)
			}
		})
	}
}
