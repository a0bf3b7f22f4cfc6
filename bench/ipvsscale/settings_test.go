package ipvsscale

import (
	"slices"
	"strings"
	"testing"
)

func TestSettingsFromEnv(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		want    Settings
		wantErr []string
	}{
		{"defaults", nil, Settings{Sizes: []int{1000, 10000}, Changes: 20, GuestMem: "512M"}, nil},
		{"all set", map[string]string{SizesEnv: "50, 2000", ChangesEnv: "3", GuestMemEnv: "1G"},
			Settings{Sizes: []int{50, 2000}, Changes: 3, GuestMem: "1G"}, nil},
		{"bad values", map[string]string{SizesEnv: "10,x", ChangesEnv: "0"}, Settings{},
			[]string{SizesEnv + `="10,x"`, `size "x"`, ChangesEnv + `="0"`}},
		{"size out of plan", map[string]string{SizesEnv: "70000"}, Settings{}, []string{"70000 service ports, want 1 to 64000"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SettingsFromEnv(func(k string) string { return tc.env[k] })
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, want one saying %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Sizes, tc.want.Sizes) || got.Changes != tc.want.Changes || got.GuestMem != tc.want.GuestMem {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
