package cluster

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

// Every node's addresses fit the plan: pod ranges inside PodCIDR and apart,
// node addresses on the router's network.
func TestAddressPlan(t *testing.T) {
	pods := netip.MustParsePrefix(PodCIDR)
	nodeNet := netip.MustParsePrefix(RouterIP + "/24")
	seen := map[netip.Prefix]string{}
	for _, n := range Nodes(MaxNodes) {
		for _, tc := range []struct {
			what string
			ok   bool
		}{
			{"pod range inside " + PodCIDR, pods.Contains(n.PodCIDR.Addr()) && n.PodCIDR.Bits() >= pods.Bits()},
			{"gateway inside its pod range", n.PodCIDR.Contains(n.Gateway)},
			{"address on the node network", nodeNet.Contains(n.IP) && n.IP.String() != RouterIP},
			{"namespace named after the node", strings.HasSuffix(n.Netns, n.Name)},
		} {
			if !tc.ok {
				t.Errorf("%s: want %s (%+v)", n.Name, tc.what, n)
			}
		}
		if other, dup := seen[n.PodCIDR]; dup {
			t.Errorf("%s and %s share the pod range %s", n.Name, other, n.PodCIDR)
		}
		seen[n.PodCIDR] = n.Name
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Nodes: 2, StateDir: "/s", ToolsBin: "/t", Image: "/i", Manifest: "/m", RepoRoot: "/r", APIPort: DefaultAPIPort, Self: "/k"}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"good", func(*Config) {}, ""},
		{"no nodes", func(c *Config) { c.Nodes = 0 }, "nodes = 0"},
		{"too many nodes", func(c *Config) { c.Nodes = MaxNodes + 1 }, "nodes = 10"},
		{"relative path", func(c *Config) { c.Image = "bin/kproxy-image.oci.tar" }, "not an absolute path"},
		{"no manifest", func(c *Config) { c.Manifest = "" }, "no manifest"},
		{"bad port", func(c *Config) { c.APIPort = 70000 }, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			err := c.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// The CNI config gives pods the node's range, with the node as gateway.
func TestCNIConfig(t *testing.T) {
	n := NodeAt(2)
	data, err := cniConfig(n, "/state/ipam")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				DataDir string `json:"dataDir"`
				Ranges  [][]struct {
					Subnet, Gateway string
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 2 || conf.Plugins[0].Type != "ptp" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("plugins %+v, want ptp then portmap", conf.Plugins)
	}
	ipam := conf.Plugins[0].IPAM
	if ipam.DataDir != "/state/ipam" || ipam.Ranges[0][0].Subnet != "198.19.17.0/24" || ipam.Ranges[0][0].Gateway != "198.19.17.1" {
		t.Errorf("ipam %+v, want node-2's range with its gateway, data in the state directory", ipam)
	}
}
