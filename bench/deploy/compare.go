package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

// Absent and Present stand for a value, or a whole object, one side lacks.
const (
	Absent  = "absent"
	Present = "present"
)

// ConfigMap keys holding documents that are compared field by field rather
// than as text: kubeadm's names, which deploy/ keeps.
const (
	KubeconfigKey = "kubeconfig.conf"
	ConfigKey     = "config.conf"
)

// APIServerKey is the ConfigMap key kproxy's manifest holds the API server
// endpoint in (kubeadm writes it into kubeconfig.conf instead).
const APIServerKey = "api-server"

// Difference is one path where two sets of manifests differ. Path is the
// object's kind and a field path (DaemonSet
// spec.template.spec.containers[0].image); the values are compact JSON, or
// Absent, or for a whole object Absent and Present.
type Difference struct {
	Path  string
	Ours  string
	Their string
}

func (d Difference) String() string {
	return fmt.Sprintf("%s: ours %s, kubeadm's %s", d.Path, d.Ours, d.Their)
}

// Parse reads a multi-document YAML stream into objects, skipping empty
// documents (comments only, or a leading ---).
func Parse(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading YAML document %d: %w", i, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", i, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			return nil, fmt.Errorf("YAML document %d is not an object: %w", i, err)
		}
		obj := &unstructured.Unstructured{Object: m}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" {
			return nil, fmt.Errorf("YAML document %d has no kind or apiVersion", i)
		}
		objs = append(objs, obj)
	}
}

// Compare walks ours and theirs field by field, pairing objects by kind
// (each kind at most once per side), and returns every difference sorted by
// path. A ConfigMap's kubeconfig is compared as the YAML it holds and its
// KubeProxyConfiguration as the typed object, so fields left out on one side
// and written as their zero value on the other do not differ; a
// KubeProxyConfiguration with an unknown or duplicate field is an error.
func Compare(ours, theirs []*unstructured.Unstructured) ([]Difference, error) {
	o, err := byKind(ours)
	if err != nil {
		return nil, fmt.Errorf("ours: %w", err)
	}
	t, err := byKind(theirs)
	if err != nil {
		return nil, fmt.Errorf("kubeadm's: %w", err)
	}
	var diffs []Difference
	for _, kind := range unionKeys(o, t) {
		a, inOurs := o[kind]
		b, inTheirs := t[kind]
		switch {
		case !inOurs:
			diffs = append(diffs, Difference{Path: kind, Ours: Absent, Their: Present})
			continue
		case !inTheirs:
			diffs = append(diffs, Difference{Path: kind, Ours: Present, Their: Absent})
			continue
		}
		na, err := normalize(a)
		if err != nil {
			return nil, fmt.Errorf("ours: %s: %w", kind, err)
		}
		nb, err := normalize(b)
		if err != nil {
			return nil, fmt.Errorf("kubeadm's: %s: %w", kind, err)
		}
		diffs = walk(diffs, kind, "", na, nb)
	}
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].Path < diffs[j].Path })
	return diffs, nil
}

func byKind(objs []*unstructured.Unstructured) (map[string]map[string]any, error) {
	m := map[string]map[string]any{}
	for _, obj := range objs {
		kind := obj.GetKind()
		if _, dup := m[kind]; dup {
			return nil, fmt.Errorf("two objects of kind %s: objects are paired by kind", kind)
		}
		m[kind] = obj.Object
	}
	return m, nil
}

// normalize returns a copy of obj with a ConfigMap's embedded documents
// parsed.
func normalize(obj map[string]any) (map[string]any, error) {
	if obj["kind"] != "ConfigMap" {
		return obj, nil
	}
	out, _ := deepCopy(obj).(map[string]any)
	data, _ := out["data"].(map[string]any)
	if s, ok := data[KubeconfigKey].(string); ok {
		var kc map[string]any
		if err := yaml.UnmarshalStrict([]byte(s), &kc); err != nil {
			return nil, fmt.Errorf("data[%q]: %w", KubeconfigKey, err)
		}
		data[KubeconfigKey] = kc
	}
	if s, ok := data[ConfigKey].(string); ok {
		cfg, err := typedConfig([]byte(s))
		if err != nil {
			return nil, fmt.Errorf("data[%q]: %w", ConfigKey, err)
		}
		data[ConfigKey] = cfg
	}
	return out, nil
}

// typedConfig decodes a KubeProxyConfiguration strictly into kube-proxy's
// v1alpha1 type and returns it as a map with every field, so a field
// written as its zero value equals one left out.
func typedConfig(doc []byte) (map[string]any, error) {
	var cfg kubeproxyconfig.KubeProxyConfiguration
	if err := yaml.UnmarshalStrict(doc, &cfg); err != nil {
		return nil, fmt.Errorf("decoding KubeProxyConfiguration: %w", err)
	}
	js, err := json.Marshal(&cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding KubeProxyConfiguration: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("re-reading KubeProxyConfiguration: %w", err)
	}
	return m, nil
}

// deepCopy copies a decoded JSON value.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = deepCopy(x)
		}
		return l
	default:
		return v
	}
}

// walk appends the differences between a and b under path. Maps are
// compared key by key and lists of equal length index by index; anything
// else, and lists of different lengths, as a whole.
func walk(diffs []Difference, kind, path string, a, b any) []Difference {
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		for _, k := range unionKeys(am, bm) {
			av, inA := am[k]
			bv, inB := bm[k]
			p := child(path, k)
			switch {
			case !inA:
				diffs = append(diffs, Difference{Path: kind + " " + p, Ours: Absent, Their: compact(bv)})
			case !inB:
				diffs = append(diffs, Difference{Path: kind + " " + p, Ours: compact(av), Their: Absent})
			default:
				diffs = walk(diffs, kind, p, av, bv)
			}
		}
		return diffs
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if aIsList && bIsList && len(al) == len(bl) {
		for i := range al {
			diffs = walk(diffs, kind, path+"["+strconv.Itoa(i)+"]", al[i], bl[i])
		}
		return diffs
	}
	if !reflect.DeepEqual(a, b) {
		diffs = append(diffs, Difference{Path: kind + " " + path, Ours: compact(a), Their: compact(b)})
	}
	return diffs
}

// child is path's field key: .key, or ["key"] when key has dots, slashes
// or other characters that would make the path ambiguous.
func child(path, key string) string {
	if !plainKey(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// plainKey reports whether key is a letter or underscore followed by
// letters, digits, underscores and dashes.
func plainKey(key string) bool {
	for i, r := range key {
		letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || !(r == '-' || (r >= '0' && r <= '9'))) {
			return false
		}
	}
	return key != ""
}

func compact(v any) string {
	js, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(js)
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
