package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"kproxy.dev/kproxy/bench/lab"
)

// TestConfigParityWithKubeProxy runs kube-proxy v1.36 and kproxy on the same
// --config files and flags and compares the outcome: refused (both name the
// field or flag) or accepted, with the same lenient-decoding warning about
// the same fields, and the same effective configuration.
//
// Both run with --write-config-to, which makes them decode, merge and
// validate everything and then exit after writing the effective
// configuration, before touching the kernel or any network (kube-proxy
// writes the file first thing in Run, before its cleanup; kproxy before
// run or cleanup). So no cluster and no namespace are needed, each run takes
// tens of milliseconds, and the written file shows which flags applied.
func TestConfigParityWithKubeProxy(t *testing.T) {
	kubeProxy := lab.KubeProxyBinary(t)
	kproxy := lab.KproxyBinary(t)

	const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	tests := []struct {
		name    string
		file    string
		flags   []string
		refused bool
		// lenient: kube-proxy warns that it decoded the file leniently.
		lenient bool
		// mention must appear in both outputs: the field or flag at fault.
		mention string
		// ignored are the flags kproxy must list in its one warning.
		ignored []string
	}{
		{name: "clean file", file: header + "mode: ipvs\nclusterCIDR: 198.19.0.0/16\n"},
		{name: "unknown fields", lenient: true, file: header + "mode: ipvs\nfooBar: 1\niptables:\n  nope: true\n", mention: `unknown field \"fooBar\"`},
		{name: "wrongly capitalised field", lenient: true, file: header + "Mode: ipvs\n", mention: `unknown field \"Mode\"`},
		{name: "duplicate field", lenient: true, file: header + "mode: iptables\nmode: ipvs\n", mention: `key "mode" already set`},
		{name: "nested duplicate field", lenient: true, file: header + "clientConnection:\n  qps: 5\n  qps: 7\n", mention: `key "qps" already set`},
		{name: "JSON unknown and duplicate", lenient: true, file: `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"ipvs","x":1,"mode":"iptables"}`,
			mention: `duplicate field \"mode\"`},
		// kube-proxy writes the sync periods back into the mode's section
		// only, and nftables' default nodePortAddresses as [primary].
		{name: "nftables sections", file: header + "mode: nftables\niptables:\n  syncPeriod: 10s\nnftables:\n  minSyncPeriod: 2s\nipvs:\n  syncPeriod: 7s\n"},
		{name: "ipvs sections", file: header + "mode: ipvs\niptables:\n  minSyncPeriod: 3s\nipvs:\n  syncPeriod: 7s\n"},
		{name: "second document ignored", file: header + "mode: ipvs\n---\n" + header + "mode: nftables\n"},
		{name: "wrong type", file: header + "iptables:\n  masqueradeBit: \"x\"\n", refused: true, mention: "iptables.masqueradeBit"},
		{name: "wrong type next to an unknown field", file: header + "foo: 1\nbindAddressHardFail: \"true\"\n", refused: true, mention: "bindAddressHardFail"},
		{name: "wrong apiVersion", file: "apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n", refused: true, mention: "kubeproxy.config.k8s.io/v1beta9"},
		{name: "wrong kind", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", refused: true, mention: "KubeletConfiguration"},
		{name: "missing kind", file: "mode: ipvs\n", refused: true, mention: "Kind"},
		{name: "bad syntax", file: header + "mode: [ipvs\n", refused: true, mention: "line 3"},
		{name: "invalid value", file: header + "mode: bogus\n", refused: true, mention: "bogus"},

		{name: "setting flags ignored", file: header + "mode: ipvs\n",
			flags:   []string{"--proxy-mode=nftables", "--kubeconfig=/nonexistent", "--iptables-masquerade-bit=3", "--conntrack-max-per-core=0", "--feature-gates=Bogus=true", "--healthz-port=0", "--metrics-bind-address=0.0.0.0:1"},
			ignored: []string{"--conntrack-max-per-core", "--feature-gates", "--healthz-port", "--iptables-masquerade-bit", "--kubeconfig", "--metrics-bind-address", "--proxy-mode"}},
		{name: "invalid values of ignored flags are not validated", file: header,
			flags:   []string{"--proxy-mode=bogus", "--iptables-masquerade-bit=99", "--cluster-cidr=bogus", "--detect-local-mode=bogus"},
			ignored: []string{"--cluster-cidr", "--detect-local-mode", "--iptables-masquerade-bit", "--proxy-mode"}},
		{name: "honoured flags", file: header + "hostnameOverride: from-file\n",
			flags: []string{"--hostname-override=Node-X", "--master=https://198.19.0.1:6443", "-v=3", "--cleanup", "--init-only"}},
		{name: "empty hostname-override keeps the file's", file: header + "hostnameOverride: from-file\n", flags: []string{"--hostname-override="}},
		{name: "blank hostname-override", file: header, flags: []string{"--hostname-override= "}, refused: true, mention: "hostname-override"},
		{name: "malformed bind-address refused while parsing", file: header, flags: []string{"--bind-address=bogus"}, refused: true, mention: "--bind-address"},
		{name: "malformed healthz-bind-address refused while parsing", file: header, flags: []string{"--healthz-bind-address=bogus"}, refused: true, mention: "--healthz-bind-address"},
		{name: "malformed duration refused while parsing", file: header, flags: []string{"--iptables-sync-period=often"}, refused: true, mention: "--iptables-sync-period"},
		{name: "malformed feature gates refused while parsing", file: header, flags: []string{"--feature-gates=bogus"}, refused: true, mention: "--feature-gates"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "config.yaml")
			if err := os.WriteFile(config, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			kp := runWritingConfig(t, kubeProxy, config, filepath.Join(dir, "kube-proxy.yaml"), tc.flags)
			k := runWritingConfig(t, kproxy, config, filepath.Join(dir, "kproxy.yaml"), tc.flags)
			if kp.refused != tc.refused {
				t.Fatalf("kube-proxy refused=%t, the test expects %t (has kube-proxy changed?):\n%s", kp.refused, tc.refused, kp.output)
			}
			if k.refused != kp.refused {
				t.Fatalf("kproxy refused=%t, kube-proxy refused=%t\nkproxy:\n%s\nkube-proxy:\n%s", k.refused, kp.refused, k.output, kp.output)
			}
			for _, r := range []proxyRun{kp, k} {
				if !strings.Contains(strings.ToLower(r.output), strings.ToLower(tc.mention)) {
					t.Errorf("%s's output does not mention %q:\n%s", r.name, tc.mention, r.output)
				}
			}
			if tc.refused {
				return
			}
			if got := strictFields(kp.output); (len(got) > 0) != tc.lenient {
				t.Errorf("kube-proxy warned about %q; the test expects a lenient-decoding warning: %t:\n%s", got, tc.lenient, kp.output)
			}
			if got, want := strictFields(k.output), strictFields(kp.output); !slices.Equal(got, want) {
				t.Errorf("lenient decoding warned about %q in kproxy, %q in kube-proxy\nkproxy:\n%s\nkube-proxy:\n%s", got, want, k.output, kp.output)
			}
			wantIgnored := ""
			if len(tc.ignored) > 0 {
				wantIgnored = "(the file sets them): " + strings.Join(tc.ignored, " ")
			}
			if got := ignoredWarning(k.output); got != wantIgnored {
				t.Errorf("kproxy's ignored-flags warning is %q, want %q:\n%s", got, wantIgnored, k.output)
			}
			if diff := cmp.Diff(comparable(t, kp.written), comparable(t, k.written)); diff != "" {
				t.Errorf("effective configurations differ (-kube-proxy +kproxy):\n%s", diff)
			}
		})
	}
}

type proxyRun struct {
	name    string
	refused bool
	output  string
	written []byte
}

// runWritingConfig runs bin --config config --write-config-to out flags...
// and reports whether it refused and what it printed and wrote.
func runWritingConfig(t *testing.T, bin, config, out string, flags []string) proxyRun {
	t.Helper()
	args := append([]string{"--config=" + config, "--write-config-to=" + out}, flags...)
	output, err := exec.Command(bin, args...).CombinedOutput()
	r := proxyRun{name: filepath.Base(bin), output: string(output)}
	switch code := exitCode(err); code {
	case 0:
		written, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("%s %q exited 0 but wrote no configuration: %v\n%s", r.name, args, err, output)
		}
		r.written = written
	case 1:
		r.refused = true
	default:
		t.Fatalf("%s %q: exit code %d (%v):\n%s", r.name, args, code, err, output)
	}
	return r
}

// strictFieldRE finds the fields a strict decoding error names, in
// kube-proxy's and kproxy's log lines alike (quoted or multi-line values).
var strictFieldRE = regexp.MustCompile(`(unknown field|duplicate field|key) \\?"([^"\\]+)\\?"`)

// strictFields lists, sorted, the fields the lenient-decoding warning
// names; nil when there is no such warning.
func strictFields(output string) []string {
	_, warning, ok := strings.Cut(output, "Using lenient decoding as strict decoding failed")
	if !ok {
		return nil
	}
	// The warning is one log entry; the next entry starts a new line with
	// a klog header.
	if end := regexp.MustCompile(`\n[IEW]\d{4} `).FindStringIndex(warning); end != nil {
		warning = warning[:end[0]]
	}
	fields := []string{}
	for _, m := range strictFieldRE.FindAllStringSubmatch(warning, -1) {
		fields = append(fields, m[1]+" "+m[2])
	}
	slices.Sort(fields)
	return fields
}

// ignoredWarning returns the list part of kproxy's ignored-flags warning,
// "" when there is none, and fails on more than one.
func ignoredWarning(output string) string {
	re := regexp.MustCompile(`\(the file sets them\): [^"\n]*`)
	all := re.FindAllString(output, -1)
	switch len(all) {
	case 0:
		return ""
	case 1:
		return all[0]
	default:
		return fmt.Sprintf("%d warnings: %q", len(all), all)
	}
}

// comparable decodes a written configuration and evens out the one
// intended difference: an unset mode, which kube-proxy writes as iptables
// (its default) and kproxy keeps empty (options.AsKubeProxyWrites says why).
// kproxy's own fields are written only when set, and none of these runs
// sets them, so any other difference counts.
func comparable(t *testing.T, written []byte) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal(written, &m); err != nil {
		t.Fatalf("decoding a written configuration: %v\n%s", err, written)
	}
	if m["mode"] == "" || m["mode"] == nil {
		m["mode"] = "iptables"
	}
	return m
}

// TestFlagsOnlyConfigParityWithKubeProxy runs kube-proxy v1.36 and kproxy
// with flags and no --config, and compares what --write-config-to writes:
// the sync periods kube-proxy keeps as one internal pair and sets from the
// mode's flags only, and the rest of the flag-built configuration.
func TestFlagsOnlyConfigParityWithKubeProxy(t *testing.T) {
	kubeProxy := lab.KubeProxyBinary(t)
	kproxy := lab.KproxyBinary(t)
	tests := []struct {
		name  string
		flags []string
	}{
		{"ipvs defaults", []string{"--proxy-mode=ipvs"}},
		{"ipvs flags", []string{"--proxy-mode=ipvs", "--ipvs-sync-period=40s", "--ipvs-min-sync-period=5s", "--iptables-sync-period=10s", "--iptables-min-sync-period=2s"}},
		{"ipvs without a minimum", []string{"--proxy-mode=ipvs", "--ipvs-min-sync-period=0s"}},
		{"nftables takes the iptables flags", []string{"--proxy-mode=nftables", "--iptables-sync-period=20s", "--iptables-min-sync-period=2s", "--ipvs-min-sync-period=3s"}},
		{"iptables", []string{"--proxy-mode=iptables", "--iptables-min-sync-period=0s", "--ipvs-min-sync-period=3s", "--detect-local-mode=NodeCIDR"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var written []map[string]any
			for _, bin := range []string{kubeProxy, kproxy} {
				out := filepath.Join(dir, filepath.Base(bin)+".yaml")
				args := append([]string{"--write-config-to=" + out, "--hostname-override=parity-node"}, tc.flags...)
				output, err := exec.Command(bin, args...).CombinedOutput()
				if err != nil {
					t.Fatalf("%s %q: %v\n%s", filepath.Base(bin), args, err, output)
				}
				data, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				written = append(written, comparable(t, data))
			}
			if diff := cmp.Diff(written[0], written[1]); diff != "" {
				t.Errorf("effective configurations differ (-kube-proxy +kproxy):\n%s", diff)
			}
		})
	}
}

// TestWrittenConfigFileMatchesKubeProxy compares the files kube-proxy v1.36
// and kproxy write with --write-config-to line by line: the same text but
// for an unset mode (kube-proxy: iptables, kproxy: "", which kube-proxy
// reads as iptables) and kproxy's own fields, which appear only when a flag
// or the file sets them, so a rollback to kube-proxy reads the file without
// an unknown-field warning.
func TestWrittenConfigFileMatchesKubeProxy(t *testing.T) {
	kubeProxy := lab.KubeProxyBinary(t)
	kproxy := lab.KproxyBinary(t)
	const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nhostnameOverride: parity-node\n"
	tests := []struct {
		name  string
		file  string   // --config contents, "" for none
		flags []string // given to both
		// kproxyFlags are kproxy's own, which kube-proxy does not accept.
		kproxyFlags []string
		// modeLine is kproxy's mode line where kube-proxy writes
		// "mode: iptables"; "" when both write the same.
		modeLine string
		// extra are the lines only kproxy writes (its own fields, top
		// level).
		extra []string
	}{
		{name: "defaults", modeLine: `mode: ""`},
		{name: "iptables", flags: []string{"--proxy-mode=iptables"}},
		{name: "ipvs", flags: []string{"--proxy-mode=ipvs"}},
		{name: "nftables", flags: []string{"--proxy-mode=nftables"}},
		{name: "file without a mode", file: header, modeLine: `mode: ""`},
		{name: "file with a mode", file: header + "mode: nftables\n"},
		{name: "kproxy flags", flags: []string{"--proxy-mode=iptables"},
			kproxyFlags: []string{"--udp-timeout=1s", "--userspace-portals=local", "--userspace-service-metrics"},
			extra:       []string{"udpIdleTimeout: 1s", "userspacePortals: local", "userspaceServiceMetrics: true"}},
		{name: "kproxy fields in the file", file: header + "mode: iptables\nudpIdleTimeout: 2s\n",
			extra: []string{"udpIdleTimeout: 2s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string(nil), tc.flags...)
			if tc.file == "" {
				args = append(args, "--hostname-override=parity-node")
			} else {
				config := filepath.Join(dir, "config.yaml")
				if err := os.WriteFile(config, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config="+config)
			}
			want := writeConfig(t, kubeProxy, filepath.Join(dir, "kube-proxy.yaml"), args)
			got := writeConfig(t, kproxy, filepath.Join(dir, "kproxy.yaml"), append(args, tc.kproxyFlags...))
			if tc.modeLine != "" {
				i := slices.Index(want, "mode: iptables")
				if i < 0 {
					t.Fatalf("kube-proxy wrote no \"mode: iptables\" line (has kube-proxy changed?):\n%s", strings.Join(want, "\n"))
				}
				want[i] = tc.modeLine
			}
			for _, line := range tc.extra {
				i := slices.Index(got, line)
				if i < 0 {
					t.Errorf("kproxy did not write %q", line)
					continue
				}
				got = slices.Delete(got, i, i+1)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("written files differ (-kube-proxy +kproxy, less the lines above):\n%s", diff)
			}
		})
	}
}

// writeConfig runs bin --write-config-to=out args... and returns the lines
// of the file it wrote.
func writeConfig(t *testing.T, bin, out string, args []string) []string {
	t.Helper()
	args = append([]string{"--write-config-to=" + out}, args...)
	if output, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", filepath.Base(bin), args, err, output)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}
