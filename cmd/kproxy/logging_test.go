package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"kproxy.dev/kproxy/bench/lab"
)

// TestLoggingFormat runs kube-proxy v1.36.3 and kproxy with the logging
// format set by flag, by the --config file's logging section, by both, and
// not at all, and checks that both proxies log in the same format: JSON
// lines, each one an object with a msg, or klog's text lines. Both only
// decode their configuration and write it out (--write-config-to), logging
// "Wrote configuration" after the logging configuration applies; both log
// what they say while reading the configuration in text, before it does.
func TestLoggingFormat(t *testing.T) {
	kubeProxy := lab.KubeProxyBinary(t)
	kproxy := lab.KproxyBinary(t)
	dir := t.TempDir()
	const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nhostnameOverride: node1\n"
	tests := []struct {
		name     string
		file     string // --config contents, "" for none
		flags    []string
		wantJSON bool
	}{
		{name: "default text", flags: []string{"--hostname-override=node1"}},
		{name: "flag json", flags: []string{"--hostname-override=node1", "--logging-format=json"}, wantJSON: true},
		{name: "config json", file: header + "logging:\n  format: json\n", wantJSON: true},
		{name: "config json, flag text wins", file: header + "logging:\n  format: json\n", flags: []string{"--logging-format=text"}},
		{name: "config text, flag json wins", file: header + "logging:\n  format: text\n", flags: []string{"--logging-format=json"}, wantJSON: true},
		{name: "config json with verbosity", file: header + "logging:\n  format: json\n  verbosity: 4\n", wantJSON: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, proxy := range []struct{ name, bin string }{{"kube-proxy", kubeProxy}, {"kproxy", kproxy}} {
				args := append([]string(nil), tt.flags...)
				if tt.file != "" {
					path := filepath.Join(dir, proxy.name+"-"+string(rune('a'+i))+".yaml")
					if err := os.WriteFile(path, []byte(tt.file), 0o644); err != nil {
						t.Fatal(err)
					}
					args = append(args, "--config="+path)
				}
				args = append(args, "--write-config-to="+filepath.Join(dir, proxy.name+"-out.yaml"))
				out, err := exec.Command(proxy.bin, args...).CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", proxy.name, strings.Join(args, " "), err, out)
				}
				checkLogFormat(t, proxy.name, string(out), tt.wantJSON)
			}
		})
	}
}

// checkLogFormat checks that "Wrote configuration" was logged as a JSON
// object (wantJSON) or as klog text, and, for text, that no line is JSON.
func checkLogFormat(t *testing.T, who, out string, wantJSON bool) {
	t.Helper()
	wrote := false
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var entry map[string]any
		isJSON := json.Unmarshal([]byte(line), &entry) == nil
		if isJSON && !wantJSON {
			t.Errorf("%s: JSON line %q in text format", who, line)
		}
		if !strings.Contains(line, "Wrote configuration") {
			continue
		}
		wrote = true
		if isJSON != wantJSON {
			t.Errorf("%s: %q is JSON: %v, want %v", who, line, isJSON, wantJSON)
		}
		if isJSON && entry["msg"] != "Wrote configuration" {
			t.Errorf("%s: JSON line %q has msg %v", who, line, entry["msg"])
		}
	}
	if !wrote {
		t.Errorf("%s did not log \"Wrote configuration\":\n%s", who, out)
	}
}

// TestLoggingSectionWritten: --write-config-to writes the logging section
// in force, the logging flags over the file's, as kube-proxy does.
func TestLoggingSectionWritten(t *testing.T) {
	kubeProxy := lab.KubeProxyBinary(t)
	kproxy := lab.KproxyBinary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"+
		"hostnameOverride: node1\nlogging:\n  format: text\n  verbosity: 2\n  vmodule:\n  - filePattern: file*\n    verbosity: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
	}{
		{"flags only", []string{"--hostname-override=node1", "-v=3", "--vmodule=a=2", "--log-flush-frequency=7s"}},
		{"file only", []string{"--config=" + file}},
		{"flags over the file", []string{"--config=" + file, "--v=5", "--vmodule=b=4", "--log-flush-frequency=9s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logging := map[string]string{}
			for _, proxy := range []struct{ name, bin string }{{"kube-proxy", kubeProxy}, {"kproxy", kproxy}} {
				out := filepath.Join(dir, proxy.name+".yaml")
				if b, err := exec.Command(proxy.bin, append(tt.args, "--write-config-to="+out)...).CombinedOutput(); err != nil {
					t.Fatalf("%s: %v\n%s", proxy.name, err, b)
				}
				written, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				var doc struct {
					Logging any `json:"logging"`
				}
				if err := yaml.Unmarshal(written, &doc); err != nil {
					t.Fatalf("%s wrote %v:\n%s", proxy.name, err, written)
				}
				b, _ := json.Marshal(doc.Logging)
				logging[proxy.name] = string(b)
			}
			if logging["kproxy"] != logging["kube-proxy"] {
				t.Errorf("logging section written:\n kproxy     %s\n kube-proxy %s", logging["kproxy"], logging["kube-proxy"])
			}
		})
	}
}
