package programs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
)

// listPath and repoRoot are seen from this package's directory.
const (
	listPath = "../../../.ci/programs"
	repoRoot = "../../.."
)

// producers are what the scan cannot read from the source: the values a
// kernel.Backend takes, and the kproxy binary the tests build.
func producers() Producers {
	var backends []string
	for _, b := range kernel.Backends() {
		backends = append(backends, string(b))
	}
	return Producers{
		"kproxy.dev/kproxy/redirect/kernel.Backend": backends,
		"kproxy.dev/kproxy/bench/lab.KproxyBinary":  {"kproxy"},
	}
}

// opaque are the sites whose program the scan cannot tell, keyed by file,
// function and expression, with the programs they run (none: the test
// binary itself) and why.
var opaque = map[string]struct {
	programs []string
	why      string
}{
	"bench/dataplane/dataplane_bench_test.go setUp os.Args[0]":                    {nil, "the benchmark binary itself, as the io.Copy relay"},
	"bench/e2e/lab_test.go (*e2eLab).startKproxyWithin wrapper[0]":                {[]string{"env", "prlimit"}, "what its callers wrap kproxy in: env (runKproxyOn) or prlimit (a lowered descriptor limit)"},
	"bench/dataplane/dataplane_bench_test.go setUp e.Binary":                      {nil, "a proxy binary the user names in KPROXY_DATAPLANE_EXTRA"},
	"bench/dataplane/scale_bench_test.go runScaleChild os.Args[0]":                {nil, "the benchmark binary itself, one child per node of the scale table"},
	"bench/dataplane/scale_bench_test.go (*bench).udpNewFlows os.Args[0]":         {nil, "the benchmark binary itself, as the new-UDP-flow client"},
	"bench/modes/load/load.go runUDPFlows self":                                   {nil, "the test binary itself (load.ChildMain), as the new-UDP-flow client"},
	"bench/modes/guest.go RunGuestSection opts.GuestExec":                         {[]string{"guest-exec"}, "KPROXY_GUEST_EXEC, which make bench-modes builds, or one the run builds"},
	"bench/guest/boot_test.go TestKilledRunnerLeavesNoGuest self":                 {nil, "the test binary itself"},
	"bench/guest/host.go Run kernel":                                              {[]string{"linux.uml"}, "the UML kernel: the configured path or the packaged one"},
	"bench/guest/program_linux.go runProgram s.Argv[0]":                           {nil, "the guest's init runs the test binary guest-exec passed"},
	"bench/guest/program_linux.go runProgram path":                                {nil, "the guest's init runs the test binary guest-exec passed"},
	"bench/ipvsref/ipvsref_test.go TestGuestSameIPVSStateAsKubeProxy kproxy":      {[]string{"kproxy"}, "KPROXY_BINARY, which make test-guest builds"},
	"cmd/kproxy/observe_parity_test.go TestBindHardFailEventMatchesKubeProxy bin": {[]string{"kproxy", "kube-proxy"}, "the two proxies compared: the kproxy the test builds and the reference kube-proxy"},
	"cmd/kproxy/monitoring_test.go TestDashboardMetricsInEveryMode bin":           {[]string{"kproxy", "kube-proxy"}, "the proxies whose dashboard series are checked: the kproxy the test builds and the reference kube-proxy"},
	"bench/analysis/programs/programs_test.go TestListedProgramsAreInstalled p":   {nil, "the listed programs themselves"},
	"bench/cluster/daemon.go (*cluster).start c.cfg.Self":                         {[]string{"kcluster"}, "kcluster itself (run-in, forward), which make cluster builds"},
	"bench/cluster/daemon.go RunIn argv[0]":                                       {[]string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet", "kcluster"}, "the cluster's daemons, which (*cluster).start passes on to kcluster run-in"},
	"bench/syncscale/syncscale_bench_test.go runRow launcher":                     {[]string{"kube-proxy", "sh"}, "kube-proxy itself, or in iptables rows the sh wrapper KubeProxyLauncher writes to run it with one backend's iptables"},
}

func TestEveryExecutedProgramIsListed(t *testing.T) {
	list, err := Load(listPath)
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	// kproxy's module, and this one: its own tests run programs too.
	var sites []Site
	for _, dir := range []string{root, filepath.Join(root, "bench", "analysis")} {
		found, err := Scan(dir, producers(), "./...")
		if err != nil {
			t.Fatal(err)
		}
		sites = append(sites, found...)
	}
	if len(sites) < 100 {
		t.Fatalf("the scan found %d sites that run programs; kproxy has well over 100: is it still finding them?", len(sites))
	}
	used := map[string]bool{}
	for _, s := range sites {
		rel, _ := filepath.Rel(root, s.Pos.Filename)
		s.Pos.Filename = rel
		progs := s.Programs
		if s.Unresolved != "" {
			key := rel + " " + s.Func + " " + s.Expr
			o, ok := opaque[key]
			if !ok {
				t.Errorf("%s\n\tmake the program's name visible (a constant, a list literal, a field set from one), or add %q to the opaque sites in this test", s, key)
				continue
			}
			used[key] = true
			progs = o.programs
		}
		for _, p := range progs {
			if _, ok := list[p]; !ok {
				t.Errorf("%s: %s runs %s, which %s does not list: add it with the Debian package that provides it", s.Pos, s.Func, p, listPath)
			}
		}
	}
	for key := range opaque {
		if !used[key] {
			t.Errorf("opaque site %q no longer exists (or the scan now reads it): remove it from this test", key)
		}
	}
}

// TestListedProgramsAreInstalled checks what .ci/install-deps and make tools
// did: every listed program is on PATH (or in the tools directory), and a
// Debian one comes from the package the list names, so a fresh machine that
// installs that package gets it. make test sets KPROXY_REQUIRE_PROGRAMS.
func TestListedProgramsAreInstalled(t *testing.T) {
	if os.Getenv("KPROXY_REQUIRE_PROGRAMS") == "" {
		t.Skip("KPROXY_REQUIRE_PROGRAMS is not set (make test sets it after installing the dependencies)")
	}
	list, err := Load(listPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Programs() {
		if err := checkInstalled(p, list[p]); err != nil {
			t.Error(err)
		}
	}
}

func checkInstalled(p string, src Source) error {
	switch src.Kind {
	case "tools":
		dir := os.Getenv(lab.ToolsBinEnv)
		if dir == "" {
			dir = "../../tools/bin"
		}
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return fmt.Errorf("%s (built by make tools): %w", p, err)
		}
		return nil
	case "cluster-tools", "conformance-tools":
		// make cluster and make conformance build them; make test does
		// not need them.
		env := map[string]string{"cluster-tools": "KPROXY_CLUSTER", "conformance-tools": "KPROXY_CONFORMANCE"}[src.Kind]
		if os.Getenv(env) == "" {
			return nil
		}
		dir := os.Getenv(lab.ToolsBinEnv)
		if dir == "" {
			dir = "../../tools/bin"
		}
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return fmt.Errorf("%s (built by make %s): %w", p, src.Kind, err)
		}
		return nil
	case "tree":
		return nil // the tests build it
	}
	path, err := exec.LookPath(p)
	if err != nil {
		return fmt.Errorf("%s (%s) is not installed: .ci/install-deps should have installed it: %w", p, src, err)
	}
	if src.Kind != "deb" {
		return nil
	}
	owners, err := debOwners(path)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if !slices.Contains(owners, src.Package) {
		return fmt.Errorf("%s is %s, which comes from %v, not from %s as %s says", p, path, owners, src, listPath)
	}
	return nil
}

// debOwners returns the Debian packages that own path, following symlinks
// (alternatives such as /usr/sbin/iptables) and /bin → /usr/bin merging.
func debOwners(path string) ([]string, error) {
	candidates := []string{path}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		candidates = append(candidates, real)
	}
	for _, c := range slices.Clone(candidates) {
		if rest, ok := strings.CutPrefix(c, "/usr"); ok {
			candidates = append(candidates, rest)
		} else {
			candidates = append(candidates, "/usr"+c)
		}
	}
	var owners []string
	for _, c := range candidates {
		out, err := exec.Command("dpkg-query", "-S", c).Output()
		if err != nil {
			continue // not a packaged path
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkgs, _, _ := strings.Cut(line, ": ")
			for _, pkg := range strings.Split(pkgs, ", ") {
				pkg, _, _ = strings.Cut(pkg, ":") // pkg:amd64
				owners = append(owners, pkg)
			}
		}
	}
	if len(owners) == 0 {
		return nil, fmt.Errorf("no Debian package owns %s", strings.Join(candidates, " or "))
	}
	return owners, nil
}

func TestScanFindsEveryKindOfSite(t *testing.T) {
	sites, err := Scan("testdata/scanmod", Producers{"example.com/scanmod.Backend": {"nft", "legacy"}}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range sites {
		v := strings.Join(s.Programs, " ")
		if s.Unresolved != "" {
			v = "?"
		}
		if prev, ok := got[s.Func]; ok {
			v = prev + " | " + v
		}
		got[s.Func] = v
	}
	want := map[string]string{
		"constant":         "iptables-save",
		"namedConstant":    "ipset",
		"throughWrapper":   "conntrack",
		"throughInterface": "nft",
		"rangeOverList":    "wrk iperf3",
		"computed":         "ip6tables-nft-restore ip6tables-legacy-restore iptables-nft-restore iptables-legacy-restore",
		"field":            "nginx",
		"launchers":        "ip haproxy | sh sleep",
		"joined":           "kube-apiserver",
		"replaced":         "iptables iptables-legacy",
		"fromEnvironment":  "?",
		"saveOf":           "?",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sites by function (-want +got):\n%s", diff)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     List
		err      string
	}{
		{name: "entries and comments", in: "# header\n\nnft   deb:nftables # the nft tool\ngo go\netcd tools\nkubelet cluster-tools\ne2e.test conformance-tools\nkproxy tree\n",
			want: List{"nft": {Kind: "deb", Package: "nftables"}, "go": {Kind: "go"}, "etcd": {Kind: "tools"}, "kubelet": {Kind: "cluster-tools"}, "e2e.test": {Kind: "conformance-tools"}, "kproxy": {Kind: "tree"}}},
		{name: "no source", in: "nft\n", err: `line 1: want "program source", got "nft"`},
		{name: "unknown source", in: "nft apt:nftables\n", err: `line 1: nft: unknown source "apt:nftables"`},
		{name: "empty package", in: "nft deb:\n", err: `unknown source "deb:"`},
		{name: "duplicate", in: "nft deb:nftables\nnft deb:nft\n", err: "line 2: nft listed twice (deb:nftables and deb:nft)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
