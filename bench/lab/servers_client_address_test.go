package lab

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
)

func TestClientAddressPathAndSourceDialer(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	topo := NewTopology(t, TopologyOptions{Backends: 1})
	StartServers(t, topo, ServerOptions{NoIperf: true})
	second := netip.MustParseAddr("198.19.0.3")
	topo.Client.MustExec("ip", "addr", "add", second.String()+"/24", "dev", "eth0")
	backend := topo.Backends[0]
	base := fmt.Sprintf("http://%s:%d", backend.IPv4, NginxPort)

	for _, tc := range []struct {
		name       string
		from       Dialer
		path       string
		wantStatus int
		wantBody   string
	}{
		{"the client's own address", topo.Client, ClientAddressURLPath, http.StatusOK, "backend-1 198.19.0.2"},
		{"a chosen source address", FromAddress(topo.Client, second), ClientAddressURLPath, http.StatusOK, "backend-1 198.19.0.3"},
		{"an error status is not an error", topo.Client, "/data/no-such-file", http.StatusNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := HTTPGetStatus(tc.from, base+tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.wantStatus || (tc.wantBody != "" && body != tc.wantBody) {
				t.Errorf("GET %s = %d %q, want %d %q", tc.path, status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
}
