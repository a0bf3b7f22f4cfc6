package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"kproxy.dev/kproxy/sync/mode"
)

func TestConfigFilePrecedence(t *testing.T) {
	path := writeTemp(t, "kproxy.yaml", header+`mode: userspace
clusterCIDR: 198.19.0.0/16
iptables:
  masqueradeBit: 5
  syncPeriod: 20s
conntrack:
  maxPerCore: 0
udpIdleTimeout: 3s
featureGates:
  A: true
  B: true
`)
	tests := []struct {
		name  string
		args  []string
		check func(*Config) (got, want any)
	}{
		{"file value used", nil, func(c *Config) (any, any) { return c.Mode, mode.Userspace }},
		{"explicit flag wins", []string{"--proxy-mode=iptables"}, func(c *Config) (any, any) { return c.Mode, mode.IPTables }},
		{"unset flag keeps file value", []string{"--proxy-mode=iptables"}, func(c *Config) (any, any) { return c.MasqueradeBit, int32(5) }},
		{"flag equal to its default still wins", []string{"--iptables-masquerade-bit=14"}, func(c *Config) (any, any) { return c.MasqueradeBit, int32(14) }},
		{"file zero value kept (not defaulted)", nil, func(c *Config) (any, any) { return c.Conntrack.MaxPerCore, int32(0) }},
		{"file omits field: default", nil, func(c *Config) (any, any) { return c.IPTablesMinSyncPeriod, time.Second }},
		{"kproxy extra field from file", nil, func(c *Config) (any, any) { return c.UDPIdleTimeout, 3 * time.Second }},
		{"kproxy extra field from flag", []string{"--udp-timeout=1s"}, func(c *Config) (any, any) { return c.UDPIdleTimeout, time.Second }},
		{"sync period from file", []string{"--iptables-min-sync-period=2s"}, func(c *Config) (any, any) { return c.IPTablesSyncPeriod, 20 * time.Second }},
		{"feature gates merge per gate", []string{"--feature-gates=B=false,C=true"}, func(c *Config) (any, any) {
			return c.FeatureGates, map[string]bool{"A": true, "B": false, "C": true}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustComplete(t, append([]string{"--config", path}, tc.args...)...)
			got, want := tc.check(cfg)
			if !equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// TestEveryFlagOverridesTheFile sets each file-backed flag to a value the
// file does not hold and checks the effective configuration changes, so a
// flag missing from flagOverrides cannot go unnoticed.
func TestEveryFlagOverridesTheFile(t *testing.T) {
	path := writeTemp(t, "base.yaml", header+"mode: iptables\n")
	values := map[string]string{
		"feature-gates":                     "X=true",
		"kubeconfig":                        "/etc/k.conf",
		"services-file":                     ".",
		"kube-api-content-type":             "application/json",
		"kube-api-qps":                      "50",
		"kube-api-burst":                    "100",
		"config-sync-period":                "1m",
		"hostname-override":                 "n1",
		"bind-address":                      "198.19.0.1",
		"bind-address-hard-fail":            "true",
		"healthz-bind-address":              "127.0.0.1:1",
		"metrics-bind-address":              "127.0.0.1:2",
		"profiling":                         "true",
		"show-hidden-metrics-for-version":   "1.35",
		"oom-score-adj":                     "0",
		"proxy-mode":                        "ipvs",
		"masquerade-all":                    "true",
		"iptables-masquerade-bit":           "3",
		"iptables-localhost-nodeports":      "false",
		"iptables-sync-period":              "1m",
		"iptables-min-sync-period":          "2s",
		"nftables-sync-period":              "1m",
		"nftables-min-sync-period":          "2s",
		"nftables-masquerade-bit":           "3",
		"ipvs-sync-period":                  "1m",
		"ipvs-min-sync-period":              "2s",
		"ipvs-scheduler":                    "sh",
		"ipvs-exclude-cidrs":                "198.18.0.0/24",
		"ipvs-strict-arp":                   "true",
		"ipvs-tcp-timeout":                  "1s",
		"ipvs-tcpfin-timeout":               "1s",
		"ipvs-udp-timeout":                  "1s",
		"proxy-port-range":                  "1000-2000",
		"udp-timeout":                       "1s",
		"userspace-portals":                 "local",
		"nodeport-addresses":                "primary",
		"detect-local-mode":                 "NodeCIDR",
		"cluster-cidr":                      "198.19.0.0/16",
		"pod-bridge-interface":              "br0",
		"pod-interface-name-prefix":         "veth",
		"conntrack-max-per-core":            "1",
		"conntrack-min":                     "1",
		"conntrack-tcp-timeout-established": "1h",
		"conntrack-tcp-timeout-close-wait":  "1m",
		"conntrack-tcp-be-liberal":          "true",
		"conntrack-udp-timeout":             "1s",
		"conntrack-udp-timeout-stream":      "1s",
	}
	overrides := flagOverrides()
	for name := range overrides {
		if _, ok := values[name]; !ok {
			t.Errorf("flag --%s has an override but no test value", name)
		}
	}
	base := effective(t, "--config", path)
	for name, value := range values {
		if _, ok := overrides[name]; !ok {
			t.Errorf("flag --%s has no override: it would be ignored with --config", name)
			continue
		}
		got := effective(t, "--config", path, "--"+name+"="+value)
		if cmp.Equal(base, got) {
			t.Errorf("--%s=%s did not change the effective configuration", name, value)
		}
		if _, err := complete(t, "--config", path, "--"+name+"="+value); err != nil {
			t.Errorf("--%s=%s: %v", name, value, err)
		}
	}
	// Flags that are not file settings must not be missing by accident.
	_, fs, _ := parsed(t)
	notInFile := map[string]bool{"config": true, "write-config-to": true, "cleanup": true, "init-only": true,
		"master": true, "healthz-port": true, "metrics-port": true}
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := values[f.Name]; !ok && !notInFile[f.Name] {
			t.Errorf("flag --%s is neither overridable nor known to be outside the file", f.Name)
		}
	})
}

func effective(t *testing.T, args ...string) *FileConfiguration {
	t.Helper()
	o, fs, err := parsed(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	eff, err := o.Effective(fs)
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

func TestFileErrorsNameFieldAndFlag(t *testing.T) {
	path := writeTemp(t, "bad.yaml", header+"mode: foo\niptables:\n  masqueradeBit: 40\n")
	_, err := complete(t, "--config", path)
	if err == nil {
		t.Fatal("want error")
	}
	for _, want := range []string{
		`invalid value "foo" for mode in config file ` + path + ` (flag --proxy-mode): must be one of userspace, iptables, ipvs, nftables`,
		`invalid value "40" for iptables.masqueradeBit in config file ` + path + ` (flag --iptables-masquerade-bit): must be within [0, 31]`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}
	// Once the flag overrides the bad file value, the error names the flag.
	_, err = complete(t, "--config", path, "--proxy-mode=bar", "--iptables-masquerade-bit=1")
	if err == nil || !strings.Contains(err.Error(), `invalid value "bar" for --proxy-mode`) || strings.Contains(err.Error(), "masqueradeBit") {
		t.Errorf("got %v, want only the --proxy-mode error", err)
	}
}

func TestStrictDecoding(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"unknown field", header + "mode: iptables\nbogusField: 1\n", `unknown field "bogusField"`},
		{"unknown nested field", header + "iptables:\n  masqBit: 3\n", `unknown field "iptables.masqBit"`},
		{"wrong case", header + "Mode: iptables\n", `"Mode"`},
		{"duplicate field", header + "mode: iptables\nmode: ipvs\n", `"mode" already set`},
		{"wrong type", header + "iptables:\n  masqueradeBit: many\n", "masqueradeBit"},
		{"bad duration", header + "configSyncPeriod: often\n", "often"},
		{"wrong apiVersion", "apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n", `unsupported apiVersion "kubeproxy.config.k8s.io/v1beta9"`},
		{"wrong kind", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", `kind "KubeletConfiguration"`},
		{"missing type meta", "mode: iptables\n", `unsupported apiVersion ""`},
		{"not yaml", header + "mode: [\n", "parsing YAML/JSON"},
		{"empty", "", "file is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTemp(t, "c.yaml", tc.content)
			_, err := complete(t, "--config", path)
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.content)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to name %s and contain %q", err, path, tc.want)
			}
		})
	}
	if _, err := complete(t, "--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: got %v", err)
	}
}

func TestJSONConfigFile(t *testing.T) {
	path := writeTemp(t, "c.json", `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration",
		"mode":"ipvs","ipvs":{"scheduler":"lc","excludeCIDRs":["198.18.0.0/16"]},"servicesFile":".","udpIdleTimeout":"1s"}`)
	cfg := mustComplete(t, "--config", path)
	if cfg.Mode != mode.IPVS || cfg.IPVSScheduler != "lc" || len(cfg.IPVSExcludeCIDRs) != 1 || cfg.ServicesFile != "." || cfg.UDPIdleTimeout != time.Second {
		t.Errorf("JSON file not applied: %+v", cfg)
	}
	if cfg.ConfigFile != path {
		t.Errorf("ConfigFile = %q, want %q", cfg.ConfigFile, path)
	}
}

func TestServicesFileAndKubeconfigInFileNameTheFields(t *testing.T) {
	path := writeTemp(t, "c.yaml", header+"servicesFile: .\nclientConnection:\n  kubeconfig: /etc/kubeconfig\n")
	_, err := complete(t, "--config", path)
	want := "servicesFile in config file " + path + " (flag --services-file) and clientConnection.kubeconfig in config file " + path + " (flag --kubeconfig) are mutually exclusive"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %q", err, want)
	}
}

func TestWriteConfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	base := writeTemp(t, "base.yaml", header+"mode: userspace\nportRange: 20000-20100\nnodePortAddresses: [198.19.0.0/24]\n")
	args := []string{"--config", base,
		"--cluster-cidr=198.19.0.0/16,fd00::/64", "--ipvs-exclude-cidrs=198.18.0.0/24", "--udp-timeout=3s",
		"--feature-gates=X=true", "--hostname-override=Node-9", "--conntrack-max-per-core=0", "--healthz-port=0",
		"--metrics-bind-address=0.0.0.0", "--services-file=" + dir}
	o, fs, err := parsed(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	want, err := o.Complete(fs)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "written.yaml")
	if err := o.WriteEffective(out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n") || !strings.Contains(string(data), "\nkind: KubeProxyConfiguration\n") {
		t.Errorf("written file lacks apiVersion/kind:\n%s", data)
	}

	// Reading the file back (via LoadFile and via --config) gives the same.
	loaded, err := LoadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(o.effective, loaded); diff != "" {
		t.Errorf("file round trip changed the configuration (-written +read):\n%s", diff)
	}
	got := mustComplete(t, "--config", out)
	want.ConfigFile, got.ConfigFile = "", ""
	if diff := cmp.Diff(want, got, cmpOpts()...); diff != "" {
		t.Errorf("--config of the written file resolves differently (-flags +file):\n%s", diff)
	}
	if got.HealthzBindAddress != "" || got.MetricsBindAddress != "0.0.0.0:10249" || got.NodeName != "node-9" || got.UDPIdleTimeout != 3*time.Second {
		t.Errorf("written file lost values: healthz %q metrics %q node %q udp %v", got.HealthzBindAddress, got.MetricsBindAddress, got.NodeName, got.UDPIdleTimeout)
	}
}
