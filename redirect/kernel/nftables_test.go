package kernel

import (
	"context"
	"testing"
)

func TestNFTablesProbe(t *testing.T) {
	tests := []struct {
		name        string
		version     string // nft --version output; "" means nft missing
		release     string
		skipKernel  bool
		tableFails  bool
		wantProblem string
		wantIPv4    bool
	}{
		{name: "debian 12", version: "nftables v1.0.6 (Lester Gooch #5)", release: "6.1.0-28-amd64", wantIPv4: true},
		{name: "nft missing", release: "6.1.0", wantProblem: "the nft tool is needed: nft: not installed"},
		{name: "nft too old", version: "nftables v0.9.8 (E.D.S.)", release: "6.1.0",
			wantProblem: "nft 0.9.8 is too old: the nftables mode needs nft 1.0.1 or later"},
		{name: "kernel too old", version: "nftables v1.0.6", release: "5.10.0-23-amd64",
			wantProblem: "kernel 5.10.0-23-amd64 is too old: the nftables mode needs 5.13 or later, as kube-proxy's does (set KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK=1 to skip the check)"},
		{name: "kernel check skipped", version: "nftables v1.0.6", release: "5.10.0", skipKernel: true, wantIPv4: true},
		{name: "no nf_tables in the kernel", version: "nftables v1.0.6", release: "6.1.0", tableFails: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &fakeNode{kernelRelease: tt.release, fail: map[string]error{}, nftVersion: tt.version}
			if tt.version == "" {
				n.fail["nft --version"] = missingBinary("nft")
			}
			if tt.tableFails {
				n.fail["nft -f -"] = exitErr("nft", "Error: Could not process rule: Operation not supported")
			}
			d := &Detector{Runner: n, System: n, Sandbox: n, SkipNFTablesKernelCheck: tt.skipKernel}
			f := d.Detect(context.Background())
			if f.NFTables.Problem != tt.wantProblem {
				t.Errorf("Problem = %q, want %q", f.NFTables.Problem, tt.wantProblem)
			}
			if f.NFTables.IPv4.Present != tt.wantIPv4 {
				t.Errorf("IPv4 = %v, want present=%v", f.NFTables.IPv4, tt.wantIPv4)
			}
			if tt.tableFails && f.NFTables.IPv4.Detail == "" {
				t.Errorf("a failed table probe must say why: %v", f.NFTables.IPv4)
			}
			for _, c := range n.calls {
				if c.line == "nft -f -" && !c.throwaway {
					t.Errorf("the table probe ran in the node's namespace")
				}
			}
		})
	}
}
