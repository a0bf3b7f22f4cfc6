package image

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// TestImageConfig checks what a container runtime reads from each
// architecture's image: one named linux manifest of that architecture whose
// entrypoint is kproxy.
func TestImageConfig(t *testing.T) {
	for _, v := range []imageVariant{amd64Image(), arm64Image()} {
		t.Run(v.arch, func(t *testing.T) {
			img := unpackImage(t, imageArchive(t, v))
			// podman load and ctr images import name the image after it;
			// build.sh's default unless IMAGE names another.
			if want := "localhost/kproxy:latest"; img.Name != want && os.Getenv(v.env) == "" {
				t.Errorf("the archive names the image %q, want %q", img.Name, want)
			}
			if img.Config.OS != "linux" || img.Config.Architecture != v.arch {
				t.Errorf("image platform %s/%s, want linux/%s", img.Config.OS, img.Config.Architecture, v.arch)
			}
			if want := []string{"/usr/local/bin/kproxy"}; !slices.Equal(img.Config.Config.Entrypoint, want) {
				t.Errorf("entrypoint %q, want %q", img.Config.Config.Entrypoint, want)
			}
			if len(img.Layers) != 2 {
				t.Errorf("%d layers, want 2 (the Debian root filesystem, then kproxy)", len(img.Layers))
			}
		})
	}
}

// TestImageTools runs, inside the image's root filesystem, every tool kproxy
// runs (iptables with both backends) and those an operator needs on a node,
// and checks the image left out what it should.
func TestImageTools(t *testing.T) {
	img := unpackImage(t, imageArchive(t, amd64Image()))
	for _, tc := range []struct {
		args []string
		want string // in the output
	}{
		{[]string{"/usr/local/bin/kproxy", "--version"}, "kproxy version "},
		{[]string{"iptables-nft", "--version"}, "(nf_tables)"},
		{[]string{"ip6tables-nft-save", "--version"}, "(nf_tables)"},
		{[]string{"iptables-legacy", "--version"}, "(legacy)"},
		{[]string{"ip6tables-legacy-restore", "--version"}, "(legacy)"},
		// Debian's default alternative, which scripts calling plain iptables get.
		{[]string{"iptables", "--version"}, "(nf_tables)"},
		{[]string{"nft", "--version"}, "nftables v"},
		{[]string{"ipset", "--version"}, "ipset v"},
		{[]string{"conntrack", "--version"}, "conntrack v"},
		{[]string{"ip", "-V"}, "iproute2"},
		{[]string{"modprobe", "--version"}, "kmod version"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			out, err := img.chroot(tc.args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s in the image: %v\n%s", strings.Join(tc.args, " "), err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("%s in the image printed %q, want it to contain %q", strings.Join(tc.args, " "), out, tc.want)
			}
		})
	}
	// The build excludes documentation, manual pages and translations.
	for _, dir := range []string{"usr/share/man", "usr/share/locale", "usr/share/info"} {
		entries, err := os.ReadDir(filepath.Join(img.Rootfs, dir))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if len(entries) > 0 {
			t.Errorf("the image has /%s (%d entries), which the build leaves out", dir, len(entries))
		}
	}
}

// TestImageDemo is `make demo`'s checks through the image, in each proxy
// mode: kproxy from the image's root filesystem, with the image's iptables
// and nft, runs on the lab's node on deploy/samples/lab.yaml, in its own
// mount and PID namespaces as a container would, with the node's network
// (hostNetwork, as the DaemonSet has it); the client reaches the backends
// through the Services' ClusterIPs and the NodePort.
func TestImageDemo(t *testing.T) {
	archive := imageArchive(t, amd64Image())
	for _, tc := range []struct {
		mode string
		// dump and dumpArgs print the node's rules, read with the host's
		// tools: the image's tools must have written what they read.
		dump     string
		dumpArgs []string
		want     string // in the dump: demo/web's ClusterIP
		// requests per check: the kernel modes pick endpoints at random, so
		// they get enough requests that missing a backend is improbable
		// (3·(2/3)^30 < 2e-5).
		requests int
	}{
		{"userspace", "iptables", []string{"-t", "nat", "-S", "KUBE-PORTALS-CONTAINER"}, "198.18.0.10/32", 9},
		{"iptables", "iptables", []string{"-t", "nat", "-S", "KUBE-SERVICES"}, "198.18.0.10/32", 30},
		{"nftables", "nft", []string{"list", "ruleset"}, "198.18.0.10", 30},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if lab.InFreshNetns(t, imageEnv+"="+archive) {
				return
			}
			kp, topo := startImageKproxy(t, archive, "--proxy-mode="+tc.mode)
			if rules := topo.Node.MustExec(tc.dump, tc.dumpArgs...); !strings.Contains(rules, tc.want) {
				t.Errorf("%s %s shows no rule for demo/web's ClusterIP %s:\n%s", tc.dump, strings.Join(tc.dumpArgs, " "), tc.want, rules)
			}
			checkDemoTraffic(t, topo, tc.requests)
			// It is the image's kproxy that answered: the only kproxy running
			// on the node has the unpacked root filesystem as its root.
			root, err := kproxyRoot(kp.proc)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := filepath.EvalSymlinks(kp.rootfs); root != want {
				t.Errorf("kproxy runs with root %s, want the image's %s", root, want)
			}
		})
	}
}

// imageKproxy is kproxy running from an unpacked image.
type imageKproxy struct {
	proc   *lab.Process
	rootfs string
}

// startImageKproxy unpacks the image, builds the lab and starts the image's
// kproxy on its node with deploy/samples/lab.yaml and the given flags; it
// returns once kproxy has synced.
func startImageKproxy(t *testing.T, archive string, flags ...string) (imageKproxy, *lab.Topology) {
	t.Helper()
	img := unpackImage(t, archive)
	services, err := os.ReadFile("../../deploy/samples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The DaemonSet mounts its ConfigMap; here the file is put in place.
	if err := os.MkdirAll(filepath.Join(img.Rootfs, "etc/kproxy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(img.Rootfs, "etc/kproxy/services.yaml"), services, 0o644); err != nil {
		t.Fatal(err)
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 3})
	lab.StartServers(t, topo, lab.ServerOptions{NoIperf: true})
	args := append(slices.Clone(img.Config.Config.Entrypoint),
		"--services-file=/etc/kproxy/services.yaml", "--hostname-override=node")
	kp := topo.Node.Start("unshare", img.containerArgs(append(args, flags...)...)...)
	lab.WaitSynced(t, kp, 1)
	return imageKproxy{proc: kp, rootfs: img.Rootfs}, topo
}

// checkDemoTraffic sends the demo's requests from the client, n per check.
func checkDemoTraffic(t *testing.T, topo *lab.Topology, n int) {
	t.Helper()
	for _, tc := range []struct {
		name     string
		ask      func() (string, error)
		backends int // distinct backends that must answer
	}{
		{"ClusterIP round-robin", func() (string, error) { return lab.HTTPGet(topo.Client, "http://198.18.0.10/") }, 3},
		{"NodePort", func() (string, error) { return lab.HTTPGet(topo.Client, "http://198.19.0.1:30080/") }, 3},
		{"ClientIP affinity", func() (string, error) { return lab.HTTPGet(topo.Client, "http://198.18.0.20/") }, 1},
		{"UDP round-robin", func() (string, error) {
			reply, err := lab.UDPAsk(topo.Client, "198.18.0.53:53", "hello")
			name, _, _ := strings.Cut(reply, " ")
			return name, err
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lab.Spread(t, n, tc.ask)
			if len(got) != tc.backends {
				t.Errorf("%d requests reached %d backends (%v), want %d", n, len(got), got, tc.backends)
			}
		})
	}
}

// kproxyRoot finds the kproxy process under p (unshare, then the shell that
// becomes chroot, then kproxy) and returns its root directory.
func kproxyRoot(p *lab.Process) (string, error) {
	pids := []int{p.Pid()}
	for len(pids) > 0 {
		pid := pids[0]
		pids = pids[1:]
		proc := filepath.Join("/proc", strconv.Itoa(pid))
		exe, err := os.Readlink(filepath.Join(proc, "exe"))
		if err == nil && filepath.Base(exe) == "kproxy" {
			return os.Readlink(filepath.Join(proc, "root"))
		}
		children, err := os.ReadFile(filepath.Join(proc, "task", strconv.Itoa(pid), "children"))
		if err != nil {
			return "", fmt.Errorf("reading the children of %d: %w", pid, err)
		}
		for _, f := range strings.Fields(string(children)) {
			c, err := strconv.Atoi(f)
			if err != nil {
				return "", fmt.Errorf("reading the children of %d: %w", pid, err)
			}
			pids = append(pids, c)
		}
	}
	return "", fmt.Errorf("no kproxy process under %s (pid %d)", p, p.Pid())
}

// containerArgs returns unshare's arguments that run args inside the root
// filesystem as a privileged hostNetwork container would: new mount and PID
// namespaces, /proc of the new PID namespace, the node's /dev, a sysfs of
// the node's network namespace and the node's kernel modules read-only (the
// DaemonSet mounts /lib/modules), then chroot.
func (img *unpacked) containerArgs(args ...string) []string {
	script := `set -e; r=$1; shift
mount --rbind /dev "$r/dev"
mount -t sysfs sysfs "$r/sys"
if [ -d /lib/modules ]; then mount --rbind -o ro /lib/modules "$r/usr/lib/modules"; fi
exec chroot "$r" /usr/bin/env -i ` + shellQuote(img.Config.Config.Env) + ` "$@"`
	return append([]string{"--mount", "--pid", "--fork", "--mount-proc=" + filepath.Join(img.Rootfs, "proc"),
		"sh", "-c", script, "sh", img.Rootfs}, args...)
}

// chroot returns a command that runs args inside the root filesystem with
// the image's environment (no namespaces: for tools that only print).
func (img *unpacked) chroot(args ...string) *exec.Cmd {
	cmd := exec.Command("chroot", append([]string{img.Rootfs}, args...)...)
	cmd.Env = img.Config.Config.Env
	return cmd
}

// shellQuote quotes words for a sh script, each in single quotes.
func shellQuote(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(quoted, " ")
}
