package clustersource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	componentconfig "k8s.io/component-base/config/v1alpha1"
)

const kubeconfigYAML = `apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://198.19.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: proxy
  user:
    token: secret
contexts:
- name: lab
  context: {cluster: lab, user: proxy}
current-context: lab
`

func TestRESTConfig(t *testing.T) {
	// Make sure the in-cluster fallback cannot succeed on a test machine.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(kubeconfigYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		kubeconfig       string
		master           string
		wantHost         string
		wantToken        string
		wantErrMentioned string
	}{
		{name: "kubeconfig", kubeconfig: kubeconfig, wantHost: "https://198.19.0.1:6443", wantToken: "secret"},
		{name: "master overrides kubeconfig server", kubeconfig: kubeconfig, master: "https://198.19.0.2:443",
			wantHost: "https://198.19.0.2:443", wantToken: "secret"},
		{name: "master alone", master: "http://198.19.0.3:8080", wantHost: "http://198.19.0.3:8080"},
		{name: "missing kubeconfig", kubeconfig: filepath.Join(t.TempDir(), "nope"), wantErrMentioned: "loading kubeconfig"},
		{name: "neither", wantErrMentioned: "in-cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := RESTConfig(tc.kubeconfig, tc.master)
			if tc.wantErrMentioned != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrMentioned) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErrMentioned)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.wantHost || cfg.BearerToken != tc.wantToken {
				t.Errorf("host %q token %q, want %q %q", cfg.Host, cfg.BearerToken, tc.wantHost, tc.wantToken)
			}
		})
	}
}

func TestApplyClientConnection(t *testing.T) {
	tests := []struct {
		name string
		cc   componentconfig.ClientConnectionConfiguration
		want rest.Config
	}{
		{"zero value gets kube-proxy defaults", componentconfig.ClientConnectionConfiguration{},
			rest.Config{ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"}, QPS: 5, Burst: 10}},
		{"explicit settings win", componentconfig.ClientConnectionConfiguration{
			AcceptContentTypes: "application/json", ContentType: "application/json", QPS: 50, Burst: 100},
			rest.Config{ContentConfig: rest.ContentConfig{AcceptContentTypes: "application/json", ContentType: "application/json"}, QPS: 50, Burst: 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got rest.Config
			ApplyClientConnection(&got, tc.cc)
			if got.ContentType != tc.want.ContentType || got.AcceptContentTypes != tc.want.AcceptContentTypes ||
				got.QPS != tc.want.QPS || got.Burst != tc.want.Burst {
				t.Errorf("got content %q accept %q qps %v burst %d, want %q %q %v %d",
					got.ContentType, got.AcceptContentTypes, got.QPS, got.Burst,
					tc.want.ContentType, tc.want.AcceptContentTypes, tc.want.QPS, tc.want.Burst)
			}
		})
	}
}
