package options

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	// APIVersion and Kind identify the only file format --config accepts.
	APIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	Kind       = "KubeProxyConfiguration"
)

// FileConfiguration is the --config file: kube-proxy's
// KubeProxyConfiguration plus the few settings kproxy has that the type lacks,
// as extra top-level fields.
type FileConfiguration struct {
	kubeproxyconfig.KubeProxyConfiguration `json:",inline"`

	// UDPIdleTimeout is the userspace proxier's idle UDP flow timeout (the
	// field old v1alpha1 files carried before userspace mode was removed).
	UDPIdleTimeout metav1.Duration `json:"udpIdleTimeout"`
	// UserspacePortals is the userspace mode's portal kind: auto, redirect
	// or local (kproxy's own; kube-proxy has no such setting).
	UserspacePortals string `json:"userspacePortals,omitempty"`
	// ServicesFile, when set, makes kproxy read services from a manifest
	// file or directory instead of a cluster.
	ServicesFile string `json:"servicesFile,omitempty"`
}

// LoadFile reads a KubeProxyConfiguration (YAML or JSON) strictly: unknown or
// duplicate fields, a wrong apiVersion or kind are errors naming the file.
// Unset fields get kube-proxy's defaults.
func LoadFile(path string) (*FileConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	fc, err := decodeFile(data)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return fc, nil
}

func decodeFile(data []byte) (*FileConfiguration, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("file is empty")
	}
	// YAML is a superset of JSON, so one path handles both. The strict
	// conversion rejects duplicate keys; the case-sensitive strict decode
	// rejects unknown fields (including wrongly capitalised ones).
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parsing YAML/JSON: %w", err)
	}
	fc := &FileConfiguration{}
	strictErrs, err := sigsjson.UnmarshalStrict(jsonData, fc)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", Kind, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("strict decoding %s: %w", Kind, errors.Join(strictErrs...))
	}
	if fc.APIVersion != APIVersion || fc.Kind != Kind {
		return nil, fmt.Errorf("unsupported apiVersion %q, kind %q: want apiVersion %q, kind %q",
			fc.APIVersion, fc.Kind, APIVersion, Kind)
	}
	SetDefaults(fc)
	return fc, nil
}

// WriteFile writes fc as YAML with apiVersion and kind set, in a form
// LoadFile reads back to the same values.
func WriteFile(path string, fc *FileConfiguration) error {
	out := *fc
	out.APIVersion = APIVersion
	out.Kind = Kind
	data, err := yaml.Marshal(&out)
	if err != nil {
		return fmt.Errorf("encoding configuration: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing configuration: %w", err)
	}
	return nil
}
