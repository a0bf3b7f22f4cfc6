package ipvs

import (
	"slices"
	"testing"

	"kproxy.dev/kproxy/redirect/ipvs/desired"
	"kproxy.dev/kproxy/redirect/restore"
)

func TestSplitRule(t *testing.T) {
	tests := []struct {
		rule    string
		want    []string
		wantErr bool
	}{
		{`-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
			[]string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}, false},
		{`-m comment --comment plain -j X`, []string{"-m", "comment", "--comment", "plain", "-j", "X"}, false},
		{`--comment "a \"quoted\" word"`, []string{"--comment", `a "quoted" word`}, false},
		{`--comment "unterminated`, nil, true},
	}
	for _, tt := range tests {
		got, err := restore.SplitRule(tt.rule)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("restore.SplitRule(%q) = %q, %v; want %q (error: %v)", tt.rule, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestRestoreJumpsArePrepended(t *testing.T) {
	js, err := desired.RestoreJumps([]desired.Jump{{Table: "filter", From: "INPUT", Rule: `-m comment --comment "x y" -j KUBE-NODE-PORT`}})
	if err != nil {
		t.Fatal(err)
	}
	if len(js) != 1 || !js[0].First || js[0].Chain != "INPUT" || js[0].Target() != "KUBE-NODE-PORT" || js[0].Args[3] != "x y" {
		t.Errorf("RestoreJumps = %+v", js)
	}
}
