package modes

import (
	"net/netip"
	"testing"
)

// Contents as the guest kernel (Linux 6.1) prints them: the VIP
// 198.18.254.1 (C612FE01) port 80 (0050), endpoints 198.19.1.101 (C6130165)
// and .102 (C6130166) port 8080 (1F90), the client 198.19.0.2 (C6130002).
const (
	ipvsTable = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  C612FE01:0050 rr
  -> C6130165:1F90      Masq    1      0          12
  -> C6130166:1F90      Masq    1      1          11
UDP  C612FE01:14B4 rr
  -> C6130165:2329      Masq    1      0          0
TCP  C6120101:0050 rr
  -> C6130167:1F90      Masq    1      0          0
`
	ipvsConnTable = `Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP C6130002 A3B0 C612FE01 0050 C6130165 1F90 TIME_WAIT       117
TCP C6130002 A3B2 C612FE01 0050 C6130166 1F90 TIME_WAIT        95
TCP C6130002 A3B4 C612FE01 0050 C6130165 1F90 ESTABLISHED     899
UDP C6130002 9C40 C612FE01 14B4 C6130165 2329 UDP             290
TCP C6130002 A3B6 C6120101 0050 C6130167 1F90 TIME_WAIT       100
`
)

func TestSummarizeIPVSConns(t *testing.T) {
	vip := netip.MustParseAddr("198.18.254.1")
	tests := []struct {
		name      string
		table     string
		vip       netip.Addr
		wantCount int
		want      string
	}{
		{name: "by state", table: ipvsConnTable, vip: vip, wantCount: 4,
			want: "4: TCP ESTABLISHED 1 (up to 899 s left), TCP TIME_WAIT 2 (up to 117 s left), UDP UDP 1 (up to 290 s left)"},
		{name: "another VIP", table: ipvsConnTable, vip: netip.MustParseAddr("198.18.1.1"), wantCount: 1,
			want: "1: TCP TIME_WAIT 1 (up to 100 s left)"},
		{name: "header only", table: "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n", vip: vip, want: "none"},
		{name: "garbage", table: "TCP zz 1 C612FEZZ 0050 x y z 1\nshort line\n", vip: vip, want: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, got := summarizeIPVSConns(tt.table, tt.vip)
			if n != tt.wantCount || got != tt.want {
				t.Errorf("got %d, %q; want %d, %q", n, got, tt.wantCount, tt.want)
			}
		})
	}
}

func TestSummarizeIPVSServices(t *testing.T) {
	tests := []struct {
		name, table, vip, want string
	}{
		{name: "both ports", table: ipvsTable, vip: "198.18.254.1",
			want: "TCP 198.18.254.1:80: 198.19.1.101:8080 w1 a0 i12 198.19.1.102:8080 w1 a1 i11; UDP 198.18.254.1:5300: 198.19.1.101:9001 w1 a0 i0"},
		{name: "not there", table: ipvsTable, vip: "198.18.254.2", want: "none"},
		{name: "empty", table: "", vip: "198.18.254.1", want: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarizeIPVSServices(tt.table, netip.MustParseAddr(tt.vip)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSummarizeConntrack(t *testing.T) {
	out := `tcp      6 1 TIME_WAIT src=198.19.0.2 dst=198.18.254.1 sport=41904 dport=80 src=198.19.1.101 dst=198.19.0.2 sport=8080 dport=41904 [ASSURED] mark=0 use=1
tcp      6 86399 ESTABLISHED src=198.19.0.2 dst=198.18.254.1 sport=41906 dport=80 src=198.19.1.102 dst=198.19.0.2 sport=8080 dport=41906 [ASSURED] mark=0 use=1
tcp      6 0 TIME_WAIT src=198.19.0.2 dst=198.18.254.1 sport=41908 dport=80 src=198.19.1.101 dst=198.19.0.2 sport=8080 dport=41908 [ASSURED] mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown.
`
	if got, want := summarizeConntrack(out), "3: ESTABLISHED 1, TIME_WAIT 2"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := summarizeConntrack("conntrack v1.4.7 (conntrack-tools): 0 flow entries have been shown.\n"); got != "none" {
		t.Errorf("no entries: got %q, want none", got)
	}
}

func TestPickCounters(t *testing.T) {
	text := `TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPSynRetrans TCPTimeWaitOverflow
TcpExt: 0 3 3 7 0
IpExt: InNoRoutes InTruncatedPkts
IpExt: 0 0
Tcp: RtoAlgorithm AttemptFails OutRsts
Tcp: 1 2 0
`
	tests := []struct {
		name  string
		names []string
		want  string
	}{
		{name: "non-zero ones", names: tcpDropCounters(), want: "ListenOverflows=3 ListenDrops=3 TCPSynRetrans=7 AttemptFails=2"},
		{name: "all zero", names: []string{"TcpExt:TCPTimeWaitOverflow", "Tcp:OutRsts"}, want: "all zero"},
		{name: "unknown", names: []string{"TcpExt:NoSuchCounter"}, want: "all zero"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pickCounters(text, tt.names); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
