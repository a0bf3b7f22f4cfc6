package modes

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// SchemaVersion is Run.Version: bump it when a field changes meaning, so
// bench-compare refuses to compare runs it would misread.
const SchemaVersion = 1

// Run is one invocation of the benchmark: the machine-readable results
// (results.json), from which the Markdown table and the plots are drawn
// and which bench-compare reads.
type Run struct {
	Version int       `json:"version"`
	Started time.Time `json:"started"`
	// TookSeconds is the whole run's wall time.
	TookSeconds float64 `json:"tookSeconds"`
	// Command is what was run (for the README: the command that made the
	// plots), Commit the kproxy revision measured.
	Command string  `json:"command"`
	Commit  string  `json:"commit"`
	Machine Machine `json:"machine"`
	// Settings the run used (sizes, durations, repeats).
	Settings Settings  `json:"settings"`
	Sections []Section `json:"sections"`
}

// Machine describes where the run happened.
type Machine struct {
	Kernel     string `json:"kernel"`
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpuModel"`
	GoVersion  string `json:"goVersion"`
	KubeProxy  string `json:"kubeProxy"`
	LoadBefore string `json:"loadBefore"`
	LoadAfter  string `json:"loadAfter"`
}

// Settings are the knobs of a run (environment, see doc.go).
type Settings struct {
	// Sizes are the service counts of the host section, ascending.
	Sizes []int `json:"sizes"`
	// GuestSizes are the service counts of the guest section.
	GuestSizes []int `json:"guestSizes"`
	// Endpoints is each service's number of endpoints.
	Endpoints int `json:"endpoints"`
	// Modes measured in the host section (IDs, see Mode), in table order.
	Modes []string `json:"modes"`
	// RunSeconds is each data-plane workload run's length; Repeats how
	// many runs of each (their spread is the run's noise).
	RunSeconds float64 `json:"runSeconds"`
	Repeats    int     `json:"repeats"`
	// NewServiceRepeats is how many new services are timed per cell.
	NewServiceRepeats int `json:"newServiceRepeats"`
}

// Section names.
const (
	// SectionHost: every mode this kernel runs, ratios to DNAT on the host.
	SectionHost = "host"
	// SectionGuest: the IPVS modes in the user-mode-linux guest kernel,
	// ratios to DNAT in the guest only (syscalls there are ~60× slower:
	// absolute figures say nothing about a real node).
	SectionGuest = "guest"
)

// Section is one kernel's cells: the host's, or the guest's.
type Section struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// Reference is the mode every data-plane ratio is taken against
	// (ModeDNAT), measured at every size of the section.
	Reference string   `json:"reference"`
	Cells     []Cell   `json:"cells"`
	Notes     []string `json:"notes,omitempty"`
}

// Mode IDs. A mode is a proxy and its proxy mode (and, for the iptables
// mode, the backend; for the userspace mode, the portal kind).
const (
	ModeDNAT                 = "dnat" // a hand-written nat PREROUTING DNAT rule
	ModeUserspaceRedirect    = "kproxy-userspace-redirect"
	ModeUserspaceLocal       = "kproxy-userspace-local"
	ModeUserspaceSKLookup    = "kproxy-userspace-sklookup"
	ModeKproxyIPTablesNFT    = "kproxy-iptables-nft"
	ModeKproxyIPTablesLegacy = "kproxy-iptables-legacy"
	ModeKproxyNFTables       = "kproxy-nftables"
	ModeKproxyIPVS           = "kproxy-ipvs"
	ModeKubeProxyIPTables    = "kube-proxy-iptables-nft"
	// kube-proxy's iptables mode on the legacy backend: on nf_tables its
	// first full sync exceeds any useful budget from about 5,000
	// services (bench-syncscale), on legacy it completes.
	ModeKubeProxyIPTablesLegacy = "kube-proxy-iptables-legacy"
	ModeKubeProxyNFTables       = "kube-proxy-nftables"
	ModeKubeProxyIPVS           = "kube-proxy-ipvs"
)

// Cell is one mode at one service count.
type Cell struct {
	Mode     string `json:"mode"`
	Services int    `json:"services"`
	// Skipped says why the cell was not measured (empty when it was).
	Skipped string `json:"skipped,omitempty"`
	// Control is nil for the DNAT reference, which has no control plane.
	Control *Control `json:"control,omitempty"`
	// Data maps a workload ID (Workload*) to its result.
	Data map[string]Workload `json:"data,omitempty"`
}

// Control-plane figures, in seconds and bytes. A figure that could not be
// taken in a mode is zero and named in Missing with the reason.
type Control struct {
	// FirstSync: process start until the first full sync finished.
	FirstSync float64 `json:"firstSync"`
	// Change: one endpoint added to one service, from the API update until
	// it is in the kernel (for the userspace mode: in the relays'
	// balancer, when the sync that holds it returns). Median of ChangeAll.
	Change    float64   `json:"change"`
	ChangeAll []float64 `json:"changeAll,omitempty"`
	// NewService: a new Service and EndpointSlice until a client gets an
	// answer through it (median of NewServiceAll).
	NewService    float64   `json:"newService"`
	NewServiceAll []float64 `json:"newServiceAll,omitempty"`
	// CPU is the proxy's CPU time (its own and its children's: iptables-
	// restore, nft) from start until just after the first sync; RSS its
	// resident set then.
	CPU float64 `json:"cpu"`
	RSS int64   `json:"rss"`
	// Missing maps a figure not taken (Figure*) to the reason.
	Missing map[string]string `json:"missing,omitempty"`
}

// Control-plane figure names, as Control.Missing keys.
const (
	FigureFirstSync  = "firstSync"
	FigureChange     = "change"
	FigureNewService = "newService"
	FigureCPU        = "cpu"
	FigureRSS        = "rss"
)

// Workload IDs: the data-plane measurements of every cell.
const (
	// WorkloadKeepAlive: HTTP requests over keep-alive connections (wrk).
	WorkloadKeepAlive = "keepalive"
	// WorkloadNewConn: one HTTP request per new TCP connection (wrk,
	// Connection: close).
	WorkloadNewConn = "newconn"
	// WorkloadUDPRR: 64-byte UDP request/response, 16 long-lived flows.
	WorkloadUDPRR = "udp-rr"
	// WorkloadUDPFlows: one request/response per new UDP flow (new
	// source port each).
	WorkloadUDPFlows = "udp-flows"
)

// Workloads lists the workload IDs in table order.
func Workloads() []string {
	return []string{WorkloadKeepAlive, WorkloadNewConn, WorkloadUDPRR, WorkloadUDPFlows}
}

// Workload is one data-plane measurement: the median over Repeats runs.
type Workload struct {
	// Rate is requests (or flows) per second.
	Rate float64 `json:"rate"`
	// P50 and P99 are latencies in milliseconds (zero where the load
	// generator does not measure them: new UDP flows).
	P50 float64 `json:"p50,omitempty"`
	P99 float64 `json:"p99,omitempty"`
	// CPUPerOp is the whole machine's busy CPU time per request, in
	// microseconds (client, proxy, server and kernel alike).
	CPUPerOp float64 `json:"cpuPerOp"`
	// Rates are every run's rate, in order: their spread is the noise
	// bench-compare weighs a change against.
	Rates []float64 `json:"rates"`
	// Lost counts requests that got no answer (UDP) or errors (TCP),
	// summed over the runs.
	Lost int64 `json:"lost,omitempty"`
}

// WriteRun writes r as indented JSON to path.
func WriteRun(path string, r Run) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the results: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the results: %w", err)
	}
	return nil
}

// ReadRun reads a results file WriteRun wrote, refusing other schema
// versions.
func ReadRun(path string) (Run, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Run{}, fmt.Errorf("reading results: %w", err)
	}
	var r Run
	if err := json.Unmarshal(data, &r); err != nil {
		return Run{}, fmt.Errorf("decoding results %s: %w", path, err)
	}
	if r.Version != SchemaVersion {
		return Run{}, fmt.Errorf("results %s have schema version %d; this program reads version %d", path, r.Version, SchemaVersion)
	}
	return r, nil
}

// Cell returns the section's cell for mode at services, if measured or
// skipped.
func (s Section) Cell(mode string, services int) (Cell, bool) {
	for _, c := range s.Cells {
		if c.Mode == mode && c.Services == services {
			return c, true
		}
	}
	return Cell{}, false
}

// Ratio is a workload's rate in mode at services over the reference's at
// the same size.
func (s Section) Ratio(mode string, services int, workload string) (float64, bool) {
	c, ok := s.Cell(mode, services)
	ref, rok := s.Cell(s.Reference, services)
	if !ok || !rok || c.Skipped != "" || ref.Skipped != "" {
		return 0, false
	}
	w, ok := c.Data[workload]
	rw, rok := ref.Data[workload]
	if !ok || !rok || rw.Rate == 0 {
		return 0, false
	}
	return w.Rate / rw.Rate, true
}
