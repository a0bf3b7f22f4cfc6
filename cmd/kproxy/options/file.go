package options

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	// Zero until a file or --udp-timeout sets it (resolve applies the
	// default), so --write-config-to writes it only then: kube-proxy v1.36
	// reads a file without it with no unknown-field warning.
	UDPIdleTimeout metav1.Duration `json:"udpIdleTimeout,omitzero"`
	// UserspacePortals is the userspace mode's portal kind: auto, redirect
	// or local (kproxy's own; kube-proxy has no such setting).
	UserspacePortals string `json:"userspacePortals,omitempty"`
	// UserspaceServiceMetrics exports the userspace relays' counters per
	// service port (kproxy's own; off by default for its cardinality).
	UserspaceServiceMetrics bool `json:"userspaceServiceMetrics,omitempty"`
	// ServicesFile, when set, makes kproxy read services from a manifest
	// file or directory instead of a cluster.
	ServicesFile string `json:"servicesFile,omitempty"`
}

// LoadFile reads a KubeProxyConfiguration (YAML or JSON) as kube-proxy
// v1.36 does: strictly first, and when only strictness fails (unknown,
// wrongly capitalised or duplicate fields) leniently, returning the strict
// errors as a warning (duplicates: the last value wins; unknown fields are
// dropped). Bad syntax, a missing or wrong apiVersion or kind and a value of
// the wrong type are errors naming the file and the field. Unset fields get
// kube-proxy's defaults.
func LoadFile(path string) (*FileConfiguration, []string, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, nil, err
	}
	fc, warning, err := decodeFile(data)
	if err != nil {
		return nil, nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var warnings []string
	if warning != nil {
		// kube-proxy's own words, so one grep finds both.
		warnings = append(warnings, fmt.Sprintf("config file %s: Using lenient decoding as strict decoding failed: %v", path, warning))
	}
	return fc, warnings, nil
}

// decodeFile follows the apimachinery serializer kube-proxy uses: YAML to
// JSON (the last of duplicate keys wins), apiVersion and kind checked before
// any field, then a strict decode whose failures of strictness only are
// returned as lenient, non-nil.
func decodeFile(data []byte) (fc *FileConfiguration, lenient error, err error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil, errors.New("file is empty: want apiVersion " + APIVersion + ", kind " + Kind)
	}
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing YAML/JSON: %w", err)
	}
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(jsonData, &tm); err != nil {
		return nil, nil, fmt.Errorf("reading apiVersion and kind: %w", err)
	}
	switch {
	case tm.Kind == "":
		return nil, nil, fmt.Errorf("kind is missing: want apiVersion %q, kind %q", APIVersion, Kind)
	case tm.APIVersion == "":
		return nil, nil, fmt.Errorf("apiVersion is missing: want apiVersion %q, kind %q", APIVersion, Kind)
	case tm.APIVersion != APIVersion || tm.Kind != Kind:
		return nil, nil, fmt.Errorf("unsupported apiVersion %q, kind %q: want apiVersion %q, kind %q",
			tm.APIVersion, tm.Kind, APIVersion, Kind)
	}

	var strictErrs []error
	// Duplicate YAML keys are lost in YAMLToJSON; the strict conversion of
	// the original finds them. JSON (which apimachinery decodes as JSON, not
	// YAML) keeps them for the strict decode below to report.
	if !isJSON(data) {
		if _, err := yaml.YAMLToJSONStrict(data); err != nil {
			strictErrs = append(strictErrs, err)
		}
	} else {
		jsonData = data
	}
	fc = &FileConfiguration{}
	jsonErrs, err := sigsjson.UnmarshalStrict(jsonData, fc)
	if err != nil {
		return nil, nil, fieldError(err)
	}
	strictErrs = append(strictErrs, jsonErrs...)
	if len(strictErrs) > 0 {
		// Decode again leniently, as kube-proxy does, so nothing depends on
		// what the strict pass left behind.
		fc = &FileConfiguration{}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(jsonData, fc); err != nil {
			return nil, nil, fieldError(err)
		}
		lenient = runtime.NewStrictDecodingError(strictErrs)
	}
	SetDefaults(fc)
	return fc, lenient, nil
}

// goStructField finds the field path in encoding/json's type errors ("Go
// struct field <Struct>.<path> of type"), whose type sigs.k8s.io/json keeps
// internal.
var goStructField = regexp.MustCompile(`Go struct field [^.\s]+\.(\S+) of type`)

// isJSON reports whether data is a JSON object, as apimachinery's
// serializer detection does.
func isJSON(data []byte) bool {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{'
}

// fieldError makes sure a decoding error names the field by its path in
// the file (iptables.masqueradeBit) rather than by Go type names.
func fieldError(err error) error {
	if m := goStructField.FindStringSubmatch(err.Error()); m != nil {
		// The inline embedding adds its type name to the path.
		return fmt.Errorf("field %s: %w", strings.TrimPrefix(m[1], "KubeProxyConfiguration."), err)
	}
	return fmt.Errorf("decoding %s: %w", Kind, err)
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

// maxConfigFileSize bounds what --config reads: a KubeProxyConfiguration is
// a few kilobytes, and --config /dev/zero must not grow the process without
// end.
const maxConfigFileSize = 1 << 20

// readConfigFile reads a regular file of at most maxConfigFileSize bytes.
// It opens without blocking (a FIFO would otherwise wait for a writer) and
// checks the opened file, not the path, so nothing can be swapped between
// the check and the read.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("config file %s: not a regular file (%s)", path, info.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading config file %s: %w", path, err)
	}
	if len(data) > maxConfigFileSize {
		return nil, fmt.Errorf("config file %s: larger than %d bytes", path, maxConfigFileSize)
	}
	return data, nil
}
