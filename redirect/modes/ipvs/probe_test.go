package ipvs

import (
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/fakeipvs"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

func TestProbeScheduler(t *testing.T) {
	tests := []struct {
		scheduler string
		wantErr   []string // fragments; none means success
	}{
		{scheduler: ""},
		{scheduler: "rr"},
		{scheduler: "mh"},
		{scheduler: "nosuch", wantErr: []string{"--ipvs-scheduler=nosuch", `no IPVS scheduler "nosuch"`, "ip_vs_nosuch", "rr"}},
	}
	for _, tt := range tests {
		t.Run(tt.scheduler, func(t *testing.T) {
			f := &fakeipvs.IPVS{}
			// A probe a killed process left behind is replaced.
			if err := f.NewService(handles.ToService(desired.VirtualServer{Key: probeKey(), Scheduler: "rr"})); err != nil {
				t.Fatal(err)
			}
			err := ProbeScheduler(f, tt.scheduler)
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("ProbeScheduler(%q) = %v, want success", tt.scheduler, err)
			}
			for _, frag := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), frag) {
					t.Errorf("ProbeScheduler(%q) = %v, want an error containing %q", tt.scheduler, err, frag)
				}
			}
			if svcs, _ := f.GetServices(); len(svcs) != 0 {
				t.Errorf("the probe left %d virtual services behind", len(svcs))
			}
		})
	}
}
