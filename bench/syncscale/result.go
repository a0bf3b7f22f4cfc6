package syncscale

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"
)

// Proxy names a proxy under test.
type Proxy string

const (
	Kproxy    Proxy = "kproxy"
	KubeProxy Proxy = "kube-proxy"
)

// Measured is one proxy's numbers in one row.
type Measured struct {
	// FullSync is from process start until the first sync finished;
	// FullSyncHist is what the full-sync histogram's sum grew by meanwhile
	// (the rule writing alone, without start-up and informer lists).
	FullSync     time.Duration
	FullSyncHist time.Duration
	// OverBudget: the first full sync was still running after Budget; the
	// numbers below were not measured.
	OverBudget bool
	Budget     time.Duration
	// Rules counts the proxy's rules after the full sync (the iptables
	// modes: the nat table's; the nftables mode: the rules in the ip
	// kube-proxy table's chains); DumpBytes is the size of its dump
	// (iptables-save's nat and filter tables; `nft list table ip
	// kube-proxy`), the measure of what a full sync writes.
	Rules     int
	DumpBytes int
	// RSS and PeakRSS are the proxy process's VmRSS and VmHWM (bytes) just
	// after its first full sync.
	RSS, PeakRSS int64
	// CPU is the proxy's CPU time until just after its first full sync:
	// its own, and its rule-writing children's (iptables-restore, nft).
	CPU CPUTimes
	// Change is from the API update adding one endpoint until the rule
	// jumping to it was in the kernel; ChangeHist is the growth of the
	// partial-sync histogram's sum for it (ChangeHistSyncs syncs), and
	// ChangeWasFull says a full sync happened instead.
	Change          time.Duration
	ChangeHist      time.Duration
	ChangeHistSyncs int
	ChangeWasFull   bool
	// Commits counts the table commits seen until the change was there
	// (each was checked; see measureChange).
	Commits int
	// NPL are the network programming latencies measured, in order.
	NPL []time.Duration
}

// NPLMedian is the median network programming latency (0 when none).
func (m Measured) NPLMedian() time.Duration { return benchtable.Median(m.NPL) }

// Row is one (mode, size) row's result.
type Row struct {
	Spec RowSpec
	// Populate is how long creating the services and slices took.
	Populate time.Duration
	// Proxies holds the proxies the row ran (see Settings.Proxies).
	Proxies map[Proxy]Measured
	// Load and LoadAfter are /proc/loadavg's 1, 5 and 15 minute figures
	// once the objects were created, and at the row's end.
	Load, LoadAfter string
}

// WriteRow stores a row's result for the parent process to read.
func WriteRow(path string, r Row) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding row %s: %w", r.Spec.Name(), err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing row %s: %w", r.Spec.Name(), err)
	}
	return nil
}

// ReadRow reads what WriteRow stored.
func ReadRow(path string) (Row, error) {
	var r Row
	data, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("reading a row result: %w", err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("decoding row result %s: %w", path, err)
	}
	return r, nil
}
