package mode

import (
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Describer is a mode that can say what it programmed for each service
// port, for the /services page. Programmed is called once per request, on
// the request's goroutine, while syncs run: the reader it returns must read
// only state that is safe to read then (what the last successful sync
// published), take no lock a sync holds for long, and be cheap per call, as
// a request may ask about every service port of the node.
type Describer interface {
	Programmed() func(servicemap.ServicePortName) Programmed
}

// Programmed is what a mode programmed for one service port. Only the
// fields of the mode that filled it are set.
type Programmed struct {
	// Chains are the iptables or nftables chains of the port.
	Chains []Chain `json:"chains,omitempty"`
	// VirtualServers are the IPVS virtual servers of the port.
	VirtualServers []VirtualServer `json:"virtualServers,omitempty"`
	// Relays are the userspace mode's relays of the port.
	Relays []Relay `json:"relays,omitempty"`
	// Counters are the userspace relays' counters, summed over the port's
	// relays; nil where the mode keeps none for it.
	Counters *RelayCounters `json:"counters,omitempty"`
	// Note says why something is missing (nothing programmed yet, a
	// protocol the kernel cannot serve, counters not kept per port).
	Note string `json:"note,omitempty"`
}

// Chain is one chain a kernel mode wrote for the port.
type Chain struct {
	Family ipfamily.Family `json:"family"`
	// Table is the iptables table ("nat", "filter") or the nftables table
	// ("kube-proxy").
	Table string `json:"table"`
	Name  string `json:"name"`
}

// VirtualServer is one IPVS virtual server and its real servers.
type VirtualServer struct {
	Family ipfamily.Family `json:"family"`
	// Address is "PROTO/ip:port".
	Address   string `json:"address"`
	Scheduler string `json:"scheduler"`
	// PersistenceSeconds is the ClientIP affinity timeout; 0 without.
	PersistenceSeconds uint32 `json:"persistenceSeconds,omitempty"`
	// RealServers are "ip:port" (weight 0: draining).
	RealServers []RealServer `json:"realServers"`
}

// RealServer is one IPVS destination.
type RealServer struct {
	Address string `json:"address"`
	Weight  int    `json:"weight"`
}

// Relay is one userspace relay: the traffic of one class (internal: the
// cluster IPs; external: node ports, external and load-balancer IPs) and
// family of the port.
type Relay struct {
	Family ipfamily.Family `json:"family"`
	Class  string          `json:"class"`
	// Portal is how traffic reaches it: redirect, local or sklookup.
	Portal string `json:"portal"`
	// ProxyPort is a REDIRECT portal's proxy port on the wildcard address.
	ProxyPort uint16 `json:"proxyPort,omitempty"`
	// Listen are the addresses a local or socket-lookup portal serves.
	Listen []string `json:"listen,omitempty"`
}

// RelayCounters are what the userspace relays of one service port counted
// since the port's first relay started.
type RelayCounters struct {
	// Connections are TCP connections and SCTP associations accepted;
	// Flows are UDP flows started.
	Connections uint64 `json:"connections"`
	Flows       uint64 `json:"flows"`
	// Active are the connections and flows open now.
	Active          int64  `json:"active"`
	DialFailures    uint64 `json:"dialFailures"`
	BytesToEndpoint uint64 `json:"bytesToEndpoint"`
	BytesToClient   uint64 `json:"bytesToClient"`
	// Refused counts refused clients by reason (lbmetrics' reason label
	// values); reasons never seen are left out.
	Refused map[string]uint64 `json:"refused,omitempty"`
}
