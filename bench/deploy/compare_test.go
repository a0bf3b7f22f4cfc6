package deploy

import (
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	const ds = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: a
spec:
  template:
    spec:
      nodeSelector:
        kubernetes.io/os: linux
      containers:
      - name: c
        image: i
`
	cm := func(config string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\ndata:\n  config.conf: |-\n" +
			indent("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"+config, "    ") +
			"  kubeconfig.conf: |-\n    clusters:\n    - cluster:\n        server: https://a:6443\n"
	}
	for _, tc := range []struct {
		name          string
		ours, theirs  string
		want, wantErr string
	}{
		{name: "equal", ours: ds, theirs: "---\n" + ds + "---\n"},
		{name: "a changed value", ours: ds, theirs: strings.Replace(ds, "image: i", "image: j", 1),
			want: `DaemonSet spec.template.spec.containers[0].image: ours "i", kubeadm's "j"`},
		{name: "a key with dots and slashes", ours: ds, theirs: strings.Replace(ds, "os: linux", "os: windows", 1),
			want: `DaemonSet spec.template.spec.nodeSelector["kubernetes.io/os"]: ours "linux", kubeadm's "windows"`},
		{name: "a field only ours has", ours: strings.Replace(ds, "image: i", "image: i\n        args: [x]", 1), theirs: ds,
			want: `DaemonSet spec.template.spec.containers[0].args: ours ["x"], kubeadm's absent`},
		{name: "a field only theirs has", ours: ds, theirs: strings.Replace(ds, "name: a", "name: a\n  labels: {k: v}", 1),
			want: `DaemonSet metadata.labels: ours absent, kubeadm's {"k":"v"}`},
		{name: "lists of different lengths", ours: ds, theirs: ds + "      - name: d\n",
			want: `DaemonSet spec.template.spec.containers: ours [{"image":"i","name":"c"}], kubeadm's [{"image":"i","name":"c"},{"name":"d"}]`},
		{name: "an object only theirs has", ours: ds, theirs: ds + "---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: s}\n",
			want: `ServiceAccount: ours absent, kubeadm's present`},
		{name: "zero values equal fields left out", ours: cm("mode: \"\"\n"),
			theirs: cm("mode: \"\"\nclusterCIDR: \"\"\nconntrack:\n  maxPerCore: null\niptables:\n  masqueradeAll: false\n")},
		{name: "a configuration field", ours: cm("mode: \"\"\n"), theirs: cm("mode: iptables\n"),
			want: `ConfigMap data["config.conf"].mode: ours "", kubeadm's "iptables"`},
		{name: "a kubeconfig field", ours: cm(""), theirs: strings.Replace(cm(""), "https://a:6443", "https://b:6443", 1),
			want: `ConfigMap data["kubeconfig.conf"].clusters[0].cluster.server: ours "https://a:6443", kubeadm's "https://b:6443"`},
		{name: "an unknown configuration field", ours: cm("mdoe: iptables\n"), theirs: cm(""),
			wantErr: `ours: ConfigMap: data["config.conf"]: decoding KubeProxyConfiguration: error unmarshaling JSON: while decoding JSON: json: unknown field "mdoe"`},
		{name: "two objects of a kind", ours: ds + "---\n" + ds, theirs: ds,
			wantErr: "ours: two objects of kind DaemonSet: objects are paired by kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, err := Parse([]byte(tc.ours))
			if err != nil {
				t.Fatal(err)
			}
			theirs, err := Parse([]byte(tc.theirs))
			if err != nil {
				t.Fatal(err)
			}
			diffs, err := Compare(ours, theirs)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("got error %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range diffs {
				got = append(got, d.String())
			}
			if strings.Join(got, "\n") != tc.want {
				t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), tc.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", "YAML document 1 has no kind or apiVersion"},
		{"not an object", "kind: A\napiVersion: v1\n---\n- a\n", "YAML document 2 is not an object: json: cannot unmarshal array into Go value of type map[string]interface {}"},
		{"bad YAML", "kind: [a\n", "YAML document 1: yaml: line 1: did not find expected ',' or ']'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || err.Error() != tc.want {
				t.Errorf("got %v, want %s", err, tc.want)
			}
		})
	}
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}
