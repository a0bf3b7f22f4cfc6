package ipvs

import (
	"testing"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

func TestRestoreJumpsArePrepended(t *testing.T) {
	js, err := desired.RestoreJumps([]desired.Jump{{Table: "filter", From: "INPUT", Rule: `-m comment --comment "x y" -j KUBE-NODE-PORT`}})
	if err != nil {
		t.Fatal(err)
	}
	if len(js) != 1 || !js[0].First || js[0].Chain != "INPUT" || js[0].Target() != "KUBE-NODE-PORT" || js[0].Args[3] != "x y" {
		t.Errorf("RestoreJumps = %+v", js)
	}
}
