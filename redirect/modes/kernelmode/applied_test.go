package kernelmode

import (
	"maps"
	"testing"

	"kproxy.dev/kproxy/sync/servicemap"
)

func TestApplied(t *testing.T) {
	a, b := servicemap.ServicePortName{Port: "a"}, servicemap.ServicePortName{Port: "b"}
	one, two := new(int), new(int)
	type want = map[servicemap.ServicePortName]*int
	tests := []struct {
		name    string
		start   want // recorded by Replace first; nil: the zero value
		update  want
		replace bool // update by Replace, else by Update
		want    want
	}{
		{name: "zero value is empty", want: want{}},
		{name: "replace drops nil ports", update: want{a: one, b: nil}, replace: true, want: want{a: one}},
		{name: "replace forgets earlier ports", start: want{a: one}, update: want{b: two}, replace: true, want: want{b: two}},
		{name: "update on the zero value", update: want{a: one, b: nil}, want: want{a: one}},
		{name: "update removes nil and keeps the rest", start: want{a: one, b: two}, update: want{a: nil}, want: want{b: two}},
		{name: "update replaces a port", start: want{a: one}, update: want{a: two}, want: want{a: two}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ap Applied[int]
			if tt.start != nil {
				ap.Replace(tt.start)
			}
			if tt.replace {
				ap.Replace(tt.update)
			} else if tt.update != nil {
				ap.Update(tt.update)
			}
			got := ap.Last()
			if !maps.Equal(got, tt.want) {
				t.Errorf("Last() = %v, want %v", got, tt.want)
			}
			for _, name := range []servicemap.ServicePortName{a, b} {
				if ap.Get(name) != tt.want[name] {
					t.Errorf("Get(%v) = %p, want %p", name, ap.Get(name), tt.want[name])
				}
			}
		})
	}
}
