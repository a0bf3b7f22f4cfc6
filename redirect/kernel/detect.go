package kernel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Names of the throw-away objects the probes create and remove again. They
// carry the KPROXY- prefix so cleanup recognises them if a probe running in
// the node's own namespace (no Sandbox) is killed half-way.
const (
	ProbeChain = "KPROXY-PROBE"
	ProbeIPSet = "KPROXY-PROBE"
	ProbeLink  = "kproxy-probe0"
)

// lockWait is how long iptables waits for the xtables lock (legacy backend)
// before giving up; another writer on the node may hold it briefly.
const lockWait = "5"

// Detector probes the node. The zero value is not usable; use NewDetector,
// or fill in fakes in tests.
type Detector struct {
	Runner Runner
	System System
	// SkipNFTablesKernelCheck is KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK.
	SkipNFTablesKernelCheck bool
	// Sandbox holds the probes that create chains, sets and links; nil, or
	// one that fails, means they run in the node's own namespace.
	Sandbox Sandbox
	// ForIPVS probes what only the IPVS mode needs the way it uses it,
	// loading modules as it goes: modprobe ip_vs, a set (ip_set and its
	// hash:ip type), a dummy link. Without it nothing is loaded: IPVS and
	// ipset count as present when their modules are loaded already (so
	// that cleanup finds another mode's leftovers), and dummy links are
	// not probed. kube-proxy loads none of these outside its IPVS mode.
	ForIPVS bool
}

// NewDetector returns a Detector that probes the real node.
func NewDetector() *Detector {
	return &Detector{
		Runner: ExecRunner{}, System: NetlinkSystem{}, Sandbox: ThreadSandbox{},
		SkipNFTablesKernelCheck: skipNFTablesKernelCheck(),
	}
}

// Detect probes the real node; see Detector.Detect, and Detector.ForIPVS
// for forIPVS.
func Detect(ctx context.Context, forIPVS bool) Features {
	d := NewDetector()
	d.ForIPVS = forIPVS
	return d.Detect(ctx)
}

// Detect runs every probe once and returns what it found. It never fails: a
// failed probe is an absent feature, with the failure in its Detail or
// Problem.
//
// It leaves the node's network namespace as it found it. Read-only
// observations (iptables-save, the IPVS genetlink family, an SCTP socket,
// conntrack counters) run in the node's namespace; probes that create
// something run in a throwaway one (see Sandbox). Only when that cannot be
// made do they run in place, removing what they create; they may then leave
// behind the empty tables they created chains in (Features.ProbeNetns says
// so).
func (d *Detector) Detect(ctx context.Context) Features {
	start := time.Now()
	var f Features
	lists := d.listAllRules(ctx)
	f.Conntrack = d.probeConntrack()
	if d.ForIPVS {
		f.IPVS = d.probeIPVS(ctx)
	} else {
		f.IPVS = d.lookUpIPVS()
	}
	f.SCTP = d.probeSCTP()
	nftVersion, nftProblem := d.probeNFTVersion(ctx)
	if nftProblem == "" {
		nftProblem = d.nftKernelProblem()
	}
	f.NFTables = NFTablesSupport{NFTVersion: nftVersion, Problem: nftProblem}
	f.ProbeNetns = d.inThrowawayNetns(ctx, func() {
		if nftProblem == "" {
			f.NFTables.IPv4 = d.probeNFTable(ctx, "ip")
			f.NFTables.IPv6 = d.probeNFTable(ctx, "ip6")
		}
		d.detectIPTables(ctx, &f, lists)
		if d.ForIPVS {
			f.IPSet = d.probeIPSet()
			f.DummyLinks = d.probeDummyLinks()
		} else {
			f.IPSet = d.lookUpIPSet()
			f.DummyLinks = Support{Detail: notForIPVS}
		}
		f.SKLookup = d.probeSKLookup()
	})
	// Read in the node's namespace: a throwaway one has its own settings.
	if err := d.System.IPv6Off(); err != nil {
		f.IPv6.NFT = withoutIPv6(f.IPv6.NFT, err)
		f.IPv6.Legacy = withoutIPv6(f.IPv6.Legacy, err)
	}
	klog.FromContext(ctx).V(2).Info("Probed kernel features", "elapsed", time.Since(start), "features", f.String())
	return f
}

// nftKernelProblem checks the kernel release against kube-proxy's minimum
// for the nftables mode.
func (d *Detector) nftKernelProblem() string {
	release, err := d.System.KernelRelease()
	if err != nil {
		return "reading the kernel release: " + err.Error()
	}
	return kernelTooOld(release, d.SkipNFTablesKernelCheck)
}

// withoutIPv6 marks an IPv6 backend unusable because the kernel will not
// carry IPv6, as kube-proxy then proxies IPv4 only. The backend choice,
// made from the rules already on the node, stands.
func withoutIPv6(t IPTables, off error) IPTables {
	t.Usable, t.Problem = false, off.Error()
	return t
}

// inThrowawayNetns runs probe in the Sandbox, or in place when there is none
// or it fails, and reports which.
func (d *Detector) inThrowawayNetns(ctx context.Context, probe func()) Support {
	err := errors.New("no sandbox configured")
	if d.Sandbox != nil {
		err = d.Sandbox.Do(probe)
	}
	if err == nil {
		return Support{Present: true}
	}
	klog.FromContext(ctx).Info("Probing kernel features in the node's own network namespace: probes remove what they create, but may leave empty iptables tables behind", "err", err)
	probe()
	return Support{Detail: "probed in the node's own network namespace: " + err.Error()}
}

// LegacyNotProbed is the Problem of a legacy backend Detect did not probe.
const LegacyNotProbed = "not probed: nft backend usable and no legacy tables present"

// ruleListing is what one backend's iptables-save showed for one family.
type ruleListing struct {
	t         IPTables // KubeRules; Problem when !ok
	hasTables bool
	ok        bool
}

type backendFamily struct {
	b   Backend
	fam ipfamily.Family
}

// listAllRules runs every backend's iptables-save for every family, in the
// node's namespace: rules already there decide the backend.
func (d *Detector) listAllRules(ctx context.Context) map[backendFamily]ruleListing {
	lists := map[backendFamily]ruleListing{}
	for _, fam := range ipfamily.All() {
		for _, b := range Backends() {
			lists[backendFamily{b, fam}] = d.listRules(ctx, b, fam)
		}
	}
	return lists
}

// detectIPTables probes both backends for both families and chooses one,
// from the node's rule listings and probes run where detectIPTables runs.
//
// The legacy backend is probed only where it may be used or is in use
// already. Creating a chain (or even listing one) with iptables-legacy makes
// the kernel register that family's legacy nat and filter tables, and they
// cannot be unregistered. Were the probe ever to run in the node's own
// namespace (no throwaway one), iptables-nft-save would from then on warn
// "iptables-legacy tables present", and tools that pick a backend by looking
// for tables (the iptables-wrapper kube-proxy images use) may be misled.
// iptables-legacy-save only reads /proc/net/ip{,6}_tables_names and creates
// nothing, so it always runs; the table-creating probes run only when nft is
// unusable (for IPv4, which decides the backend, or for this family), when
// legacy-save shows tables already, or when legacy was chosen anyway.
func (d *Detector) detectIPTables(ctx context.Context, f *Features, lists map[backendFamily]ruleListing) {
	for _, fam := range ipfamily.All() {
		f.family(fam).NFT = d.probeIPTables(ctx, NFT, fam, lists[backendFamily{NFT, fam}])
	}
	for _, fam := range ipfamily.All() {
		ft := f.family(fam)
		ft.Legacy = d.probeLegacy(ctx, fam, !f.IPv4.NFT.Usable || !ft.NFT.Usable, lists[backendFamily{Legacy, fam}])
	}
	f.Backend, f.BackendReason = chooseBackend(f.IPv4, f.IPv6)
	if f.Backend != Legacy {
		return
	}
	// Legacy was chosen for its IPv4 rules: every family's rules go there,
	// so a family skipped above must be probed after all.
	for _, fam := range ipfamily.All() {
		if ft := f.family(fam); ft.Legacy.NotProbed {
			ft.Legacy = d.probeIPTables(ctx, Legacy, fam, lists[backendFamily{Legacy, fam}])
		}
	}
}

// probeLegacy probes the legacy backend for fam further than its listing l
// only when needed or when it holds tables already; see detectIPTables.
func (d *Detector) probeLegacy(ctx context.Context, fam ipfamily.Family, needed bool, l ruleListing) IPTables {
	switch {
	case !l.ok:
		return l.t
	case needed || l.hasTables:
		return d.probeChains(ctx, Legacy, fam, l.t)
	default:
		t := l.t
		t.NotProbed, t.Problem = true, LegacyNotProbed
		return t
	}
}

// chooseBackend follows the iptables-wrapper idea: rules already on the node
// decide, because kubelet, CNI plugins and the proxy must all write to the
// same backend or packets see two rule sets. Without such rules nft wins, as
// it is where distributions are heading.
func chooseBackend(v4, v6 FamilyIPTables) (Backend, string) {
	nftKube := v4.NFT.KubeRules + v6.NFT.KubeRules
	legacyKube := v4.Legacy.KubeRules + v6.Legacy.KubeRules
	switch {
	case legacyKube > nftKube && v4.Legacy.Usable:
		return Legacy, fmt.Sprintf("iptables-legacy already holds %d kube rule lines (nft holds %d)", legacyKube, nftKube)
	case nftKube > 0 && v4.NFT.Usable:
		return NFT, fmt.Sprintf("iptables-nft already holds %d kube rule lines (legacy holds %d)", nftKube, legacyKube)
	case v4.NFT.Usable:
		return NFT, "no kube rules in either backend; nft is preferred"
	case v4.Legacy.Usable:
		return Legacy, "the nft backend is unusable (" + v4.NFT.Problem + "); using legacy"
	default:
		return "", fmt.Sprintf("no usable iptables backend: nft: %s; legacy: %s", v4.NFT.Problem, v4.Legacy.Problem)
	}
}

// countKubeLines counts iptables-save lines naming a KUBE- or KPROXY- chain.
func countKubeLines(save string) int {
	n := 0
	for _, line := range strings.Split(save, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.Contains(line, "KUBE-") || strings.Contains(line, "KPROXY-") {
			n++
		}
	}
	return n
}

// probeIPTables probes what backend b can do for fam, given its listing l.
func (d *Detector) probeIPTables(ctx context.Context, b Backend, fam ipfamily.Family, l ruleListing) IPTables {
	if !l.ok {
		return l.t
	}
	return d.probeChains(ctx, b, fam, l.t)
}

// listRules runs b's iptables-save for fam, counting kube rules, and notes
// whether the output holds any table. It changes nothing in the kernel.
func (d *Detector) listRules(ctx context.Context, b Backend, fam ipfamily.Family) ruleListing {
	save, err := d.Runner.Run(ctx, nil, b.SaveCommand(fam))
	if err != nil {
		return ruleListing{t: IPTables{Problem: "listing rules: " + describe(err)}}
	}
	return ruleListing{t: IPTables{KubeRules: countKubeLines(string(save))}, hasTables: hasTable(string(save)), ok: true}
}

// hasTable reports whether iptables-save output holds a table ("*nat" ...).
func hasTable(save string) bool {
	for _, line := range strings.Split(save, "\n") {
		if strings.HasPrefix(line, "*") {
			return true
		}
	}
	return false
}

// probeChains creates a probe chain in the nat and filter tables of backend b
// for fam (creating those tables if need be, hence run in a Sandbox), tries the targets the proxy
// modes use in it, and removes it again. t carries listRules' findings.
//
// One restore first declares the chains with every target in them: a node
// that has them all, the common case, pays one command, not four (a
// kproxy start runs this for two families, and each command costs most on
// the slow nodes). Only when it fails are the chains declared alone and the
// targets tried one by one, to tell which is missing.
func (d *Detector) probeChains(ctx context.Context, b Backend, fam ipfamily.Family, t IPTables) IPTables {
	targets := probeTargets(fam, &t)
	defer d.removeProbeChains(ctx, b, fam)
	var all strings.Builder
	fmt.Fprintf(&all, "*nat\n:%s - [0:0]\n", ProbeChain)
	for _, target := range targets {
		fmt.Fprintf(&all, "-A %s %s\n", ProbeChain, strings.Join(target.args, " "))
	}
	fmt.Fprintf(&all, "COMMIT\n*filter\n:%s - [0:0]\nCOMMIT\n", ProbeChain)
	if _, err := d.Runner.Run(ctx, []byte(all.String()), b.RestoreCommand(fam), "-w", lockWait, "--noflush"); err == nil {
		t.Usable = true
		for _, target := range targets {
			*target.result = true
		}
		return t
	}

	declare := "*nat\n:" + ProbeChain + " - [0:0]\nCOMMIT\n*filter\n:" + ProbeChain + " - [0:0]\nCOMMIT\n"
	if _, err := d.Runner.Run(ctx, []byte(declare), b.RestoreCommand(fam), "-w", lockWait, "--noflush"); err != nil {
		t.Problem = "creating a chain in nat and filter: " + describe(err)
		return t
	}
	t.Usable = true
	for _, target := range targets {
		args := append([]string{"-w", lockWait, "-t", "nat", "-A", ProbeChain}, target.args...)
		if _, err := d.Runner.Run(ctx, nil, b.Command(fam), args...); err != nil {
			if t.Problem == "" {
				t.Problem = target.name + ": " + describe(err)
			}
			continue
		}
		*target.result = true
	}
	return t
}

// probeTarget is one target the modes use, the rule that tries it in the
// probe chain, and where its result goes.
type probeTarget struct {
	name   string
	result *bool
	args   []string
}

func probeTargets(fam ipfamily.Family, t *IPTables) []probeTarget {
	vip, dest := "198.18.0.1", "198.19.0.1:80"
	if fam == ipfamily.IPv6 {
		vip, dest = "fd00::1", "[fd00::2]:80"
	}
	return []probeTarget{
		{"DNAT", &t.DNAT, []string{"-p", "tcp", "-d", vip, "-j", "DNAT", "--to-destination", dest}},
		{"REDIRECT", &t.Redirect, []string{"-p", "tcp", "-d", vip, "-j", "REDIRECT", "--to-ports", "80"}},
		{"MASQUERADE --random-fully", &t.RandomFully, []string{"-j", "MASQUERADE", "--random-fully"}},
	}
}

// removeProbeChains flushes and deletes the probe chains; declaring a chain
// with --noflush empties it, so this works whatever the probe added.
func (d *Detector) removeProbeChains(ctx context.Context, b Backend, fam ipfamily.Family) {
	var in strings.Builder
	for _, table := range []string{"nat", "filter"} {
		fmt.Fprintf(&in, "*%s\n:%s - [0:0]\n-X %s\nCOMMIT\n", table, ProbeChain, ProbeChain)
	}
	if _, err := d.Runner.Run(ctx, []byte(in.String()), b.RestoreCommand(fam), "-w", lockWait, "--noflush"); err != nil {
		klog.FromContext(ctx).V(2).Info("Could not remove iptables probe chains", "command", b.RestoreCommand(fam), "err", err)
	}
}

func (d *Detector) probeConntrack() Support {
	if err := d.System.ConntrackStats(); err != nil {
		return Support{Detail: "conntrack is not reachable over netlink: " + err.Error()}
	}
	return Support{Present: true}
}

func (d *Detector) probeIPVS(ctx context.Context) Support {
	err := d.System.GenlFamily("IPVS")
	if errors.Is(err, unix.ENOENT) {
		// The family appears once ip_vs is loaded; loading is best effort
		// (modprobe may be missing, or modules built in or unavailable).
		if _, mpErr := d.Runner.Run(ctx, nil, "modprobe", "ip_vs"); mpErr != nil {
			klog.FromContext(ctx).V(4).Info("modprobe ip_vs failed", "err", mpErr)
		}
		err = d.System.GenlFamily("IPVS")
	}
	switch {
	case err == nil:
		return Support{Present: true}
	case errors.Is(err, unix.ENOENT):
		return Support{Detail: `no generic netlink family "IPVS"; is the ip_vs module available?`}
	default:
		return Support{Detail: `looking up generic netlink family "IPVS": ` + err.Error()}
	}
}

// probeIPSet creates and destroys a set over netlink, as the IPVS mode
// manages its sets: the ipset tool is not needed.
func (d *Detector) probeIPSet() Support {
	if err := d.System.CreateIPSet(ProbeIPSet); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPROTONOSUPPORT) {
			return Support{Detail: "the kernel has no ip_set support (modules ip_set, ip_set_hash_ip): " + err.Error()}
		}
		return Support{Detail: "creating a set over netlink: " + err.Error()}
	}
	if err := d.System.DestroyIPSet(ProbeIPSet); err != nil {
		return Support{Present: true, Detail: "probe set left behind: " + err.Error()}
	}
	return Support{Present: true}
}

func (d *Detector) probeDummyLinks() Support {
	err := d.System.AddDummyLink(ProbeLink)
	if errors.Is(err, unix.EEXIST) {
		// Left behind by a probe that was killed; replace it.
		_ = d.System.DeleteLink(ProbeLink)
		err = d.System.AddDummyLink(ProbeLink)
	}
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		return Support{Detail: "the kernel does not know the dummy link type (no dummy module)"}
	case err != nil:
		return Support{Detail: "creating a dummy link: " + err.Error()}
	}
	if err := d.System.DeleteLink(ProbeLink); err != nil {
		return Support{Present: true, Detail: "probe link left behind: " + err.Error()}
	}
	return Support{Present: true}
}

// notForIPVS is the Detail of a feature only the IPVS mode's probes look
// for with their modules (Detector.ForIPVS).
const notForIPVS = "not probed: only the IPVS mode needs it, and its module is not loaded"

// lookUpIPVS is probeIPVS for a mode other than IPVS: the genetlink family
// is looked up only when ip_vs is loaded (the lookup would load it).
func (d *Detector) lookUpIPVS() Support {
	if !d.System.ModuleLoaded("ip_vs") {
		return Support{Detail: notForIPVS}
	}
	if err := d.System.GenlFamily("IPVS"); err != nil {
		return Support{Detail: `looking up generic netlink family "IPVS": ` + err.Error()}
	}
	return Support{Present: true}
}

// lookUpIPSet is probeIPSet for a mode other than IPVS: ip_set is present
// when loaded, which is all cleanup needs (another mode's sets exist only
// then); creating a set would load it and its hash:ip type.
func (d *Detector) lookUpIPSet() Support {
	if !d.System.ModuleLoaded("ip_set") {
		return Support{Detail: notForIPVS}
	}
	return Support{Present: true, Detail: "ip_set is loaded; not probed further"}
}

// probeSCTP looks for SCTP without opening an SCTP socket, which would make
// the kernel load the sctp module on every node in every mode: kube-proxy
// never loads it (an upstream spec checks that a Service of SCTP does
// not), and only the userspace mode's relays need it, for an SCTP service
// port. Present: SCTP is registered now, or its module is one the kernel
// loads on demand, which the first SCTP relay's socket then does.
func (d *Detector) probeSCTP() Support {
	registered, err := d.System.ProtocolRegistered("SCTP")
	if err != nil {
		return Support{Detail: "reading /proc/net/protocols: " + err.Error()}
	}
	if registered {
		return Support{Present: true}
	}
	loadable, err := d.System.ModuleLoadable("sctp")
	switch {
	case err != nil:
		return Support{Detail: "the kernel has no SCTP sockets loaded, and no module list to load them from: " + err.Error()}
	case loadable:
		return Support{Present: true, Detail: "the sctp module is not loaded; the first SCTP service port's relay loads it"}
	}
	return Support{Detail: "the kernel has no SCTP sockets (no sctp module)"}
}

// probeSKLookup loads, attaches and detaches the socket-lookup program. In
// the node's own namespace (no Sandbox) it is attached for a moment with
// empty maps, when it passes every packet to the kernel's own lookup.
func (d *Detector) probeSKLookup() Support {
	if err := d.System.SKLookup(); err != nil {
		return Support{Detail: err.Error()}
	}
	return Support{Present: true}
}

// describe turns a command failure into one short line.
func describe(err error) string {
	var ce *CommandError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	if ce.NotFound() {
		return ce.Command + ": not installed"
	}
	if line := firstLine(ce.Stderr); line != "" {
		return line
	}
	return ce.Error()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
