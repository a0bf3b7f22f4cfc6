package options

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
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
  LoggingAlphaOptions: true
  ComponentFlagz: true
hostnameOverride: File-Node
`)
	tests := []struct {
		name  string
		args  []string
		check func(*Config) (got, want any)
	}{
		{"file value used", nil, func(c *Config) (any, any) { return c.Mode, mode.Userspace }},
		{"setting flag ignored", []string{"--proxy-mode=iptables"}, func(c *Config) (any, any) { return c.Mode, mode.Userspace }},
		{"flag equal to its default ignored", []string{"--iptables-masquerade-bit=14"}, func(c *Config) (any, any) { return c.MasqueradeBit, int32(5) }},
		{"file zero value kept (not defaulted)", nil, func(c *Config) (any, any) { return c.Conntrack.MaxPerCore, int32(0) }},
		{"file omits field: default", nil, func(c *Config) (any, any) { return c.IPTablesMinSyncPeriod, time.Second }},
		{"kproxy extra field from file", nil, func(c *Config) (any, any) { return c.UDPIdleTimeout, 3 * time.Second }},
		{"kproxy extra setting flag ignored", []string{"--udp-timeout=1s"}, func(c *Config) (any, any) { return c.UDPIdleTimeout, 3 * time.Second }},
		{"feature gates flag ignored", []string{"--feature-gates=ComponentFlagz=false,ContextualLogging=true"}, func(c *Config) (any, any) {
			return c.FeatureGates, map[string]bool{"LoggingAlphaOptions": true, "ComponentFlagz": true}
		}},
		{"deprecated port flag ignored", []string{"--healthz-port=0"}, func(c *Config) (any, any) { return c.HealthzBindAddress, "0.0.0.0:10256" }},
		{"hostname-override honoured", []string{"--hostname-override=Flag-Node"}, func(c *Config) (any, any) { return c.NodeName, "flag-node" }},
		{"empty hostname-override keeps the file's", []string{"--hostname-override="}, func(c *Config) (any, any) { return c.NodeName, "file-node" }},
		{"master honoured", []string{"--master=https://198.19.0.1:6443"}, func(c *Config) (any, any) { return c.Master, "https://198.19.0.1:6443" }},
		{"services-file honoured", []string{"--services-file=."}, func(c *Config) (any, any) { return c.ServicesFile, "." }},
		{"cleanup honoured", []string{"--cleanup"}, func(c *Config) (any, any) { return c.Cleanup, true }},
		{"init-only honoured", []string{"--init-only"}, func(c *Config) (any, any) { return c.InitOnly, true }},
		{"no warning without ignored flags", []string{"--hostname-override=n", "--cleanup"}, func(c *Config) (any, any) { return c.Warnings, []string(nil) }},
		{"one warning listing the ignored flags", []string{"--proxy-mode=iptables", "--hostname-override=n", "--kubeconfig=/k", "--metrics-port=1"},
			func(c *Config) (any, any) {
				return c.Warnings, []string{"ignoring flags given with --config " + path + ", as kube-proxy does (the file sets them): --kubeconfig --metrics-port --proxy-mode"}
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

// TestEveryFlagOverridesTheDefaults sets each file-backed flag to a value
// other than its default and checks the effective configuration changes
// without --config, and, with --config, changes only for the flags
// kube-proxy honours there and is otherwise reported as ignored; so a flag
// missing from flagOverrides cannot go unnoticed.
func TestEveryFlagOverridesTheDefaults(t *testing.T) {
	path := writeTemp(t, "base.yaml", header+"mode: iptables\n")
	values := map[string]string{
		"feature-gates":                     "LoggingAlphaOptions=true",
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
		"userspace-service-metrics":         "true",
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
	base := effective(t)
	withFile := effective(t, "--config", path)
	for name, value := range values {
		if _, ok := overrides[name]; !ok {
			t.Errorf("flag --%s has no override: it would be ignored", name)
			continue
		}
		flag := "--" + name + "=" + value
		if got := effective(t, flag); cmp.Equal(base, got) {
			t.Errorf("%s did not change the effective configuration", flag)
		}
		o, fs, err := parsed(t, "--config", path, flag)
		if err != nil {
			t.Fatal(err)
		}
		got, warnings, err := o.Effective(fs)
		if err != nil {
			t.Fatal(err)
		}
		if honouredWithConfig(name) {
			if cmp.Equal(withFile, got) || len(warnings) != 0 {
				t.Errorf("%s with --config: ignored (warnings %q), but kube-proxy honours it", flag, warnings)
			}
		} else {
			wantWarning := []string{"ignoring flags given with --config " + path + ", as kube-proxy does (the file sets them): --" + name}
			if !cmp.Equal(withFile, got) || !cmp.Equal(warnings, wantWarning) {
				t.Errorf("%s with --config: warnings %q, configuration changed %t; want it ignored with warning %q",
					flag, warnings, !cmp.Equal(withFile, got), wantWarning)
			}
		}
		if _, err := complete(t, "--config", path, flag); err != nil {
			t.Errorf("%s: %v", flag, err)
		}
	}
	// Flags that are not file settings must not be missing by accident.
	_, fs, _ := parsed(t)
	notInFile := map[string]bool{"config": true, "write-config-to": true, "cleanup": true, "init-only": true,
		"master": true, "healthz-port": true, "metrics-port": true,
		// kube-proxy's cAdvisor flags, which it never reads (TestCAdvisorFlags).
		"boot-id-file": true, "machine-id-file": true}
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
	eff, _, err := o.Effective(fs)
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
	// Flags next to --config are ignored (as by kube-proxy): the errors
	// still name the file's fields, never the flags' values.
	_, err = complete(t, "--config", path, "--proxy-mode=bar", "--iptables-masquerade-bit=1")
	if err == nil || !strings.Contains(err.Error(), `invalid value "foo" for mode in config file`) || strings.Contains(err.Error(), `"bar"`) {
		t.Errorf("got %v, want the file's errors only", err)
	}
	// Without --config the flag's value is the one named.
	_, err = complete(t, "--proxy-mode=bar")
	if err == nil || !strings.Contains(err.Error(), `invalid value "bar" for --proxy-mode`) {
		t.Errorf("got %v, want the --proxy-mode error", err)
	}
}

// TestLenientDecoding checks kube-proxy v1.36's outcome for each kind of
// flawed file (observed with the real binary, see parity_test.go): strictness
// failures are one warning and the file is used, everything else is refused
// with an error naming the file and the field.
func TestLenientDecoding(t *testing.T) {
	tests := []struct {
		name, content string
		// warning is the text after "strict decoding error: " when the
		// file is accepted; err a part of the refusal otherwise.
		warning, err string
		check        func(*Config) (got, want any)
	}{
		{name: "clean", content: header + "mode: ipvs\n",
			check: func(c *Config) (any, any) { return c.Mode, mode.IPVS }},
		{name: "unknown fields", content: header + "mode: ipvs\nbogusField: 1\niptables:\n  masqBit: 3\n",
			warning: `unknown field "bogusField", unknown field "iptables.masqBit"`,
			check:   func(c *Config) (any, any) { return c.Mode, mode.IPVS }},
		{name: "wrong case is unknown and dropped", content: header + "Mode: ipvs\n",
			warning: `unknown field "Mode"`,
			check:   func(c *Config) (any, any) { return c.Mode, mode.Name("") }},
		{name: "duplicate field: last wins", content: header + "mode: iptables\nmode: ipvs\n",
			warning: "yaml: unmarshal errors:\n  line 4: key \"mode\" already set in map",
			check:   func(c *Config) (any, any) { return c.Mode, mode.IPVS }},
		{name: "nested duplicate", content: header + "clientConnection:\n  qps: 5\n  qps: 6\n",
			warning: "yaml: unmarshal errors:\n  line 5: key \"qps\" already set in map",
			check:   func(c *Config) (any, any) { return c.QPS, float32(6) }},
		{name: "JSON unknown and duplicate", content: `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"ipvs","x":1,"mode":"nftables"}`,
			warning: `unknown field "x", duplicate field "mode"`,
			check:   func(c *Config) (any, any) { return c.Mode, mode.NFTables }},
		{name: "second YAML document ignored", content: header + "mode: ipvs\n---\n" + header + "mode: nftables\n",
			check: func(c *Config) (any, any) { return c.Mode, mode.IPVS }},
		{name: "wrong type", content: header + "iptables:\n  masqueradeBit: many\n", err: "field iptables.masqueradeBit: "},
		{name: "wrong type next to unknown field", content: header + "foo: 1\niptables:\n  masqueradeBit: \"x\"\n", err: "field iptables.masqueradeBit: "},
		{name: "string for bool", content: header + "bindAddressHardFail: \"true\"\n", err: "field bindAddressHardFail: "},
		{name: "number for mode", content: header + "mode: 5\n", err: "field mode: "},
		{name: "bad duration", content: header + "configSyncPeriod: often\n", err: "often"},
		{name: "wrong apiVersion", content: "apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n", err: `unsupported apiVersion "kubeproxy.config.k8s.io/v1beta9"`},
		{name: "wrong kind", content: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", err: `kind "KubeletConfiguration"`},
		{name: "wrong apiVersion before wrong type", content: "apiVersion: v1\nkind: KubeProxyConfiguration\nmode: 5\n", err: `unsupported apiVersion "v1"`},
		{name: "missing kind", content: "mode: iptables\n", err: "kind is missing"},
		{name: "missing apiVersion", content: "kind: KubeProxyConfiguration\n", err: "apiVersion is missing"},
		{name: "not yaml", content: header + "mode: [\n", err: "parsing YAML/JSON"},
		{name: "empty", content: "", err: "file is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTemp(t, "c.yaml", tc.content)
			cfg, err := complete(t, "--config", path)
			if tc.err != "" {
				if err == nil {
					t.Fatalf("accepted:\n%s", tc.content)
				}
				if !strings.Contains(err.Error(), "config file "+path+": ") || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %q\nwant it to name %s and contain %q", err, path, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			var want []string
			if tc.warning != "" {
				want = []string{"config file " + path + ": Using lenient decoding as strict decoding failed: strict decoding error: " + tc.warning}
			}
			if diff := cmp.Diff(want, cfg.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if got, want := tc.check(cfg); !equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
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
	args := []string{"--proxy-mode=userspace", "--proxy-port-range=20000-20100", "--nodeport-addresses=198.19.0.0/24",
		"--cluster-cidr=198.19.0.0/16,fd00::/64", "--ipvs-exclude-cidrs=198.18.0.0/24", "--udp-timeout=3s",
		"--feature-gates=LoggingAlphaOptions=true", "--hostname-override=Node-9", "--conntrack-max-per-core=0", "--healthz-port=0",
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
	loaded, warnings, err := LoadFile(out)
	if err != nil || warnings != nil {
		t.Fatalf("reading the written file back: warnings %q, error %v", warnings, err)
	}
	// The file carries apiVersion and kind, flags do not.
	loaded.TypeMeta = o.effective.TypeMeta
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

// TestCompleteLogsWarnings checks the warnings reach the log, once each.
func TestCompleteLogsWarnings(t *testing.T) {
	path := writeTemp(t, "c.yaml", header+"bogus: 1\n")
	o, fs, err := parsed(t, "--config", path, "--proxy-mode=ipvs")
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	o.Logger = funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{})
	if _, err := o.Complete(fs); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`"level"=0 "msg"="Configuration warning" "warning"="config file ` + path + `: Using lenient decoding as strict decoding failed: strict decoding error: unknown field \"bogus\""`,
		`"level"=0 "msg"="Configuration warning" "warning"="ignoring flags given with --config ` + path + `, as kube-proxy does (the file sets them): --proxy-mode"`,
	}
	if diff := cmp.Diff(want, logged); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

// TestFlagsWithConfigOutcome checks, flag by flag, what kube-proxy v1.36
// does next to --config (observed with the real binary, see
// cmd/kproxy/config_parity_test.go): malformed values of its typed flags are
// refused while parsing even though the flag is then ignored, values that
// are only invalid are ignored with the flag.
func TestFlagsWithConfigOutcome(t *testing.T) {
	path := writeTemp(t, "c.yaml", header+"hostnameOverride: from-file\n")
	tests := []struct {
		flag string
		// err is a part of the refusal; "" means accepted.
		err string
		// ignored is true when the flag must be in the warning.
		ignored bool
	}{
		{flag: "--bind-address=bogus", err: `invalid value "bogus" for --bind-address: not a valid IP address`},
		{flag: "--bind-address=198.19.0.1", ignored: true},
		{flag: "--healthz-bind-address=bogus", err: `invalid value "bogus" for --healthz-bind-address: not in a valid format (ip or ip:port)`},
		{flag: "--healthz-bind-address=198.19.0.1:99999", err: `"99999" is not a valid port`},
		{flag: "--healthz-bind-address=bogus:1", err: `"bogus" is not a valid IP address`},
		{flag: "--metrics-bind-address=198.19.0.1", ignored: true},
		{flag: "--metrics-bind-address=", ignored: true},
		{flag: "--iptables-sync-period=often", err: `invalid argument "often" for "--iptables-sync-period"`},
		{flag: "--feature-gates=bogus", err: `"bogus" is not of the form name=true|false`},
		{flag: "--feature-gates=Bogus=true", ignored: true},
		{flag: "--proxy-mode=bogus", ignored: true},
		{flag: "--iptables-masquerade-bit=99", ignored: true},
		{flag: "--cluster-cidr=bogus", ignored: true},
		{flag: "--detect-local-mode=bogus", ignored: true},
		{flag: "--oom-score-adj=5000", ignored: true},
		{flag: "--hostname-override= ", err: `invalid value " " for --hostname-override: must not be blank`},
		{flag: "--hostname-override="},
		{flag: "--hostname-override=n"},
		{flag: "--services-file=."},
		{flag: "--master=https://198.19.0.1:6443"},
		{flag: "--cleanup"},
		{flag: "--init-only"},
	}
	for _, tc := range tests {
		t.Run(tc.flag, func(t *testing.T) {
			cfg, err := complete(t, "--config", path, tc.flag)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			name, _, _ := strings.Cut(tc.flag, "=")
			var want []string
			if tc.ignored {
				want = []string{"ignoring flags given with --config " + path + ", as kube-proxy does (the file sets them): " + name}
			}
			if diff := cmp.Diff(want, cfg.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigFileThatIsNotAFile: --config must name a regular file of sane
// size; anything else is refused at once, naming it, without reading on.
func TestConfigFileThatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, []byte(header+"#"+strings.Repeat("x", maxConfigFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{"/dev/zero", "not a regular file"},
		{fifo, "not a regular file"},
		{dir, "not a regular file"},
		{huge, "larger than 1048576 bytes"},
	}
	for _, tc := range tests {
		done := make(chan error, 1)
		go func() {
			_, _, err := LoadFile(tc.path)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("LoadFile(%s) = %v, want an error naming it and %q", tc.path, err, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("LoadFile(%s) still reading after 5 s", tc.path)
		}
	}
}
