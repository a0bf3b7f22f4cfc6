package debugz

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
)

func serve(h http.Handler, accept string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	h.ServeHTTP(rec, req)
	return rec
}

func TestConfigz(t *testing.T) {
	body, err := Configz(kubeproxyconfig.KubeProxyConfiguration{Mode: "nftables", HostnameOverride: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("/configz is not a JSON object of objects: %v\n%s", err, body)
	}
	cfg, ok := got[ConfigzGroup]
	if len(got) != 1 || !ok {
		t.Fatalf("/configz keys %v, want only %s", got, ConfigzGroup)
	}
	for k, want := range map[string]string{"kind": "KubeProxyConfiguration", "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "mode": "nftables", "hostnameOverride": "n1"} {
		if cfg[k] != want {
			t.Errorf("/configz %s = %v, want %q", k, cfg[k], want)
		}
	}
	rec := serve(ConfigzHandler(body), "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != string(body) {
		t.Errorf("ConfigzHandler: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
}

func TestFlagz(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("proxy-mode", "", "")
	fs.String("token", "", "")
	_ = fs.SetAnnotation("token", "classified", []string{"true"})
	if err := fs.Parse([]string{"--proxy-mode=nftables", "--token=secret"}); err != nil {
		t.Fatal(err)
	}
	flags := Flags(fs)
	h := FlagzHandler("kproxy", flags)

	text := serve(h, "")
	lines := strings.Split(text.Body.String(), "\n")
	if text.Code != http.StatusOK || len(lines) != 6 || lines[0] != "" || lines[1] != "kproxy flagz" || !strings.HasPrefix(lines[2], "Warning: ") ||
		!regexp.MustCompile(`^proxy-mode(:|: |=| )nftables$`).MatchString(lines[3]) ||
		!regexp.MustCompile(`^token(:|: |=| )CLASSIFIED$`).MatchString(lines[4]) {
		t.Errorf("text /flagz = %d %q", text.Code, lines)
	}

	for _, v := range []string{"v1alpha1", "v1beta1"} {
		rec := serve(h, "application/json;as=Flagz;v="+v+";g=config.k8s.io")
		want := `{"kind":"Flagz","apiVersion":"config.k8s.io/` + v + `","metadata":{"name":"kproxy"},"flags":{"proxy-mode":"nftables","token":"CLASSIFIED"}}`
		if rec.Code != http.StatusOK || rec.Body.String() != want {
			t.Errorf("JSON /flagz %s = %d %s, want %s", v, rec.Code, rec.Body.String(), want)
		}
	}
	if rec := serve(h, "application/json;as=Statusz;v=v1beta1;g=config.k8s.io"); rec.Code != http.StatusNotAcceptable {
		t.Errorf("/flagz asked for a Statusz: %d, want 406", rec.Code)
	}
	if rec := serve(h, "text/plain, */*"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "kproxy flagz") {
		t.Errorf("/flagz for text/plain: %d %q", rec.Code, rec.Body.String())
	}
}

func TestStatusz(t *testing.T) {
	started := time.Now().Add(-(3*time.Hour + 4*time.Minute + 5*time.Second))
	h := StatuszHandler("kproxy", Status{Started: started, BinaryVersion: "1.2.3",
		Paths: []string{"/metrics", "/metrics/slis", "/healthz", "/configz", "/debug/pprof/", "/"}})
	text := serve(h, "").Body.String()
	re := regexp.MustCompile(`^\nkproxy statusz\nWarning: [^\n]*\n\nStarted(:|: |=| ) [A-Z][a-z]{2} [^\n]*\nUp(:|: |=| ) 3 hr 04 min \d\d sec\n` +
		`Go version(:|: |=| ) go[^\n]+\nBinary version(:|: |=| ) 1\.2\.3\n\nPaths(:|: |=| ) /configz /debug /healthz /metrics\n$`)
	if !re.MatchString(text) {
		t.Errorf("text /statusz:\n%q", text)
	}
	rec := serve(h, "application/json;as=Statusz;v=v1beta1;g=config.k8s.io")
	var got struct {
		Kind          string
		BinaryVersion string
		Paths         []string
		Emulation     *string `json:"emulationVersion"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Kind != "Statusz" || got.BinaryVersion != "1.2.3" ||
		strings.Join(got.Paths, " ") != "/configz /debug /healthz /metrics" {
		t.Errorf("JSON /statusz = %s (%v)", rec.Body.String(), err)
	}
	if got.Emulation != nil {
		t.Error("JSON /statusz has an emulationVersion though none was given")
	}
}

func TestVerbosityHandler(t *testing.T) {
	h := VerbosityHandler()
	put := func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/debug/flags/v", strings.NewReader(body)))
		return rec
	}
	defer put("0")
	if rec := put("3"); rec.Code != http.StatusOK || !klog.V(3).Enabled() || klog.V(4).Enabled() {
		t.Errorf("PUT 3: %d %q, V(3) %v V(4) %v", rec.Code, rec.Body.String(), klog.V(3).Enabled(), klog.V(4).Enabled())
	}
	if rec := put("three"); rec.Code != http.StatusBadRequest {
		t.Errorf("PUT three: %d, want 400", rec.Code)
	}
	if rec := serve(h, ""); rec.Code != http.StatusNotAcceptable {
		t.Errorf("GET: %d, want 406", rec.Code)
	}
}
