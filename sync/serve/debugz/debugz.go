// Package debugz serves kube-proxy's debugging pages on the metrics
// address: /configz (the effective KubeProxyConfiguration), /flagz (the
// command line's flags) and /statusz (start time, uptime, versions and the
// other pages). kube-proxy v1.36 serves the last two through
// k8s.io/apiserver's zpages (beta, on by default: the ComponentFlagz and
// ComponentStatusz feature gates); kproxy does not link k8s.io/apiserver,
// whose handlers bring in tracing and gRPC, and writes the same text and
// structured (config.k8s.io Flagz and Statusz) forms here.
package debugz

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/metrics/prometheus/slis"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
)

const (
	// ConfigzGroup is the key /configz serves the configuration under, as
	// kube-proxy (k8s.io/component-base/configz with its API group).
	ConfigzGroup = "kubeproxy.config.k8s.io"
	zpagesGroup  = "config.k8s.io"
	warning      = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only."
)

// delimiters are zpages' key-value separators; one is picked per response
// so that nobody parses the text form.
var delimiters = [...]string{":", ": ", "=", " "}

// Configz encodes c as kube-proxy's /configz does:
// {"kubeproxy.config.k8s.io": {"kind": "KubeProxyConfiguration", ...}}.
func Configz(c kubeproxyconfig.KubeProxyConfiguration) ([]byte, error) {
	c.Kind = "KubeProxyConfiguration"
	c.APIVersion = kubeproxyconfig.SchemeGroupVersion.String()
	out, err := json.Marshal(map[string]any{ConfigzGroup: c})
	if err != nil {
		return nil, fmt.Errorf("encoding /configz: %w", err)
	}
	return out, nil
}

// ConfigzHandler serves body, as Configz encoded it.
func ConfigzHandler(body []byte) http.Handler {
	body = append([]byte(nil), body...)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body)
	})
}

// Flags reads the flags /flagz shows: every flag of fs with its value.
func Flags(fs *pflag.FlagSet) map[string]string {
	out := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Value == nil {
			return
		}
		v := f.Value.String()
		if len(f.Annotations["classified"]) > 0 {
			v = "CLASSIFIED"
		}
		out[f.Name] = v
	})
	return out
}

// FlagzHandler serves the flags of component: text by default, a
// config.k8s.io Flagz object (v1alpha1 or v1beta1) in JSON when asked with
// Accept: application/json;as=Flagz;g=config.k8s.io;v=….
func FlagzHandler(component string, flags map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		version, structured, ok := negotiate(w, r, "Flagz")
		if !ok {
			return
		}
		if structured {
			writeJSON(w, flagz{
				TypeMeta:   metav1.TypeMeta{Kind: "Flagz", APIVersion: zpagesGroup + "/" + version},
				ObjectMeta: metav1.ObjectMeta{Name: component}, Flags: flags,
			})
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s flagz\n%s\n", component, warning)
		sep := delimiters[rand.IntN(len(delimiters))]
		keys := make([]string, 0, len(flags))
		for k := range flags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s%s%s\n", k, sep, flags[k])
		}
		writeText(w, b.String())
	})
}

// flagz and statusz are the config.k8s.io objects zpages serve (same
// fields, same JSON order as k8s.io/apiserver's).
type flagz struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Flags             map[string]string `json:"flags,omitempty"`
}

type statusz struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	StartTime         metav1.Time `json:"startTime"`
	UptimeSeconds     int64       `json:"uptimeSeconds"`
	GoVersion         string      `json:"goVersion"`
	BinaryVersion     string      `json:"binaryVersion"`
	EmulationVersion  string      `json:"emulationVersion,omitempty"`
	Paths             []string    `json:"paths"`
}

// Status is what /statusz shows.
type Status struct {
	Started time.Time
	// BinaryVersion is the version without its leading v, as kube-proxy
	// shows "1.36.3"; EmulationVersion is left out when empty.
	BinaryVersion, EmulationVersion string
	// Paths are the other pages of the server.
	Paths []string
}

// StatuszHandler serves s for component: text by default, a config.k8s.io
// Statusz object in JSON when asked (as FlagzHandler).
func StatuszHandler(component string, s Status) http.Handler {
	paths := topLevelPaths(s.Paths)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		version, structured, ok := negotiate(w, r, "Statusz")
		if !ok {
			return
		}
		up := int64(time.Since(s.Started).Seconds())
		if structured {
			writeJSON(w, statusz{
				TypeMeta:   metav1.TypeMeta{Kind: "Statusz", APIVersion: zpagesGroup + "/" + version},
				ObjectMeta: metav1.ObjectMeta{Name: component},
				StartTime:  metav1.NewTime(s.Started), UptimeSeconds: up, GoVersion: runtime.Version(),
				BinaryVersion: s.BinaryVersion, EmulationVersion: s.EmulationVersion, Paths: paths,
			})
			return
		}
		d := html.EscapeString(delimiters[rand.IntN(len(delimiters))])
		emulation := ""
		if s.EmulationVersion != "" {
			emulation = fmt.Sprintf("Emulation version%s %s", d, html.EscapeString(s.EmulationVersion))
		}
		pathLine := ""
		if len(paths) > 0 {
			pathLine = fmt.Sprintf("Paths%s %s", d, html.EscapeString(strings.Join(paths, " ")))
		}
		writeText(w, fmt.Sprintf("\n%s statusz\n%s\n\nStarted%[3]s %[4]s\nUp%[3]s %[5]s\nGo version%[3]s %[6]s\nBinary version%[3]s %[7]s\n%[8]s\n%[9]s\n",
			component, warning, d, html.EscapeString(s.Started.Format(time.UnixDate)),
			fmt.Sprintf("%d hr %02d min %02d sec", up/3600, (up/60)%60, up%60),
			html.EscapeString(runtime.Version()), html.EscapeString(s.BinaryVersion), emulation, pathLine))
	})
}

// topLevelPaths reduces paths to their first segment, sorted, as zpages
// lists them (/metrics/slis is /metrics).
func topLevelPaths(paths []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		parts := strings.Split(p, "/")
		if len(parts) < 2 || parts[1] == "" {
			continue
		}
		if top := "/" + parts[1]; !seen[top] {
			seen[top] = true
			out = append(out, top)
		}
	}
	sort.Strings(out)
	return out
}

// negotiate reads the Accept header: text (empty, text/plain, */*) or a
// structured object of kind in JSON at version v1alpha1 or v1beta1 of
// config.k8s.io. Anything else gets 406 and ok false.
func negotiate(w http.ResponseWriter, r *http.Request, kind string) (version string, structured, ok bool) {
	accept := strings.TrimSpace(r.Header.Get("Accept"))
	if accept == "" {
		return "", false, true
	}
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "text/plain", "text/*", "*/*":
			if params["as"] == "" {
				return "", false, true
			}
		case "application/json":
			v := params["v"]
			if params["as"] == kind && params["g"] == zpagesGroup && (v == "v1alpha1" || v == "v1beta1") {
				return v, true, true
			}
		}
	}
	http.Error(w, fmt.Sprintf("only text/plain or application/json;as=%s;g=%s;v=v1beta1 (or v1alpha1) is served", kind, zpagesGroup),
		http.StatusNotAcceptable)
	return "", false, false
}

func writeText(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = fmt.Fprint(w, body)
}

func writeJSON(w http.ResponseWriter, obj any) {
	body, err := json.Marshal(obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(body)
}

// VerbosityHandler is kube-proxy's /debug/flags/v (with --profiling): a
// PUT of a number sets the log verbosity; other methods get 406.
func VerbosityHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			plain(w, http.StatusNotAcceptable, "unsupported http method")
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 64))
		if err != nil {
			plain(w, http.StatusBadRequest, "error reading request body: "+err.Error())
			return
		}
		msg, err := logs.GlogSetter(string(body))
		if err != nil {
			plain(w, http.StatusBadRequest, err.Error())
			return
		}
		plain(w, http.StatusOK, msg)
	})
}

func plain(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, text)
}

// PingHealthz is what kube-proxy serves at /healthz on its metrics port:
// k8s.io/apiserver's generic health endpoint with its one ping check
// ("ok"; the check list with ?verbose; ?exclude=ping), recorded in the
// /metrics/slis health-check SLIs. The proxy's own health is on the healthz
// port.
func PingHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out strings.Builder
		excluded := false
		var unknown []string
		for _, names := range r.URL.Query()["exclude"] {
			for name := range strings.SplitSeq(names, ",") {
				switch name = strings.TrimSpace(name); name {
				case "":
				case "ping":
					excluded = true
				default:
					unknown = append(unknown, fmt.Sprintf("%q", name))
				}
			}
		}
		if excluded {
			out.WriteString("[+]ping excluded: ok\n")
		} else {
			slis.ObserveHealthcheck(r.Context(), "ping", "healthz", slis.Success)
			out.WriteString("[+]ping ok\n")
		}
		if len(unknown) > 0 {
			fmt.Fprintf(&out, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(unknown, ","))
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if _, verbose := r.URL.Query()["verbose"]; !verbose {
			_, _ = fmt.Fprint(w, "ok")
			return
		}
		_, _ = fmt.Fprint(w, out.String()+"healthz check passed\n")
	})
}

// Ping is /healthz/ping: always "ok".
func Ping() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "ok") })
}
