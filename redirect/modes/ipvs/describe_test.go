package ipvs

import (
	"fmt"
	"strings"
	"testing"
)

func TestProgrammedListsTheVirtualServers(t *testing.T) {
	g := newRig(t, -1)
	if got := g.m.Programmed()(web().Name); len(got.VirtualServers) != 0 || got.Note == "" {
		t.Errorf("before any sync: %+v, want a note only", got)
	}
	g.mustSync(t, web(), dns())
	read := g.m.Programmed()
	for _, sp := range []string{"web", "dns"} {
		port := web()
		if sp == "dns" {
			port = dns()
		}
		got := read(port.Name)
		var lines []string
		for _, vs := range got.VirtualServers {
			var rs []string
			for _, r := range vs.RealServers {
				rs = append(rs, fmt.Sprintf("%s@%d", r.Address, r.Weight))
			}
			lines = append(lines, fmt.Sprintf("%s %s %s %s", vs.Family, vs.Address, vs.Scheduler, strings.Join(rs, ",")))
		}
		// Every virtual server of the port is in the fake kernel, with
		// as many real servers as the port has endpoints.
		if len(got.VirtualServers) == 0 {
			t.Fatalf("%s: no virtual servers: %+v", sp, got)
		}
		text := g.kernelText()
		for _, vs := range got.VirtualServers {
			if !strings.Contains(text, strings.Replace(vs.Address, "/", " ", 1)+" "+vs.Scheduler) {
				t.Errorf("%s: virtual server %s is not in the kernel:\n%s", sp, vs.Address, text)
			}
			if len(vs.RealServers) != len(port.Endpoints) {
				t.Errorf("%s: %s has %d real servers, want %d", sp, vs.Address, len(vs.RealServers), len(port.Endpoints))
			}
		}
		t.Logf("%s:\n%s", sp, strings.Join(lines, "\n"))
	}
}
