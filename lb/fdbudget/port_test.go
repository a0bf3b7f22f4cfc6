package fdbudget

import "testing"

func TestPortLimitsFor(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		want  PortLimits
	}{
		{limit: 1 << 20, want: PortLimits{Connections: 1 << 17, Dialing: 1 << 15}},
		{limit: 4096, want: PortLimits{Connections: 512, Dialing: 128}},
		{limit: 64, want: PortLimits{Connections: minPortConnections, Dialing: minPortConnections}},
	} {
		if got := PortLimitsFor(tc.limit); got != tc.want {
			t.Errorf("PortLimitsFor(%d) = %+v, want %+v", tc.limit, got, tc.want)
		}
	}
}

func TestPortAdmits(t *testing.T) {
	p, err := NewPort(PortLimits{Connections: 3, Dialing: 2})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() PortVerdict
		want PortVerdict
	}{
		{"first", p.Admit, PortAdmitted},
		{"second", p.Admit, PortAdmitted},
		{"third while two dial", p.Admit, PortDialingFull},
		{"third once one connected", func() PortVerdict { p.Dialed(); return p.Admit() }, PortAdmitted},
		{"fourth once another connected", func() PortVerdict { p.Dialed(); return p.Admit() }, PortFull},
		{"fourth once a dialing one gave up", func() PortVerdict { p.Release(true); return p.Admit() }, PortAdmitted},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Fatalf("%s: %v, want %v", s.name, got, s.want)
		}
	}
	if held, dialing := p.Held(); held != 3 || dialing != 1 {
		t.Errorf("held %d, dialing %d; want 3 and 1", held, dialing)
	}
	var none *Port
	if none.Admit() != PortAdmitted {
		t.Error("a nil Port refused")
	}
	if _, err := NewPort(PortLimits{}); err == nil {
		t.Error("NewPort accepted zero limits")
	}
}
