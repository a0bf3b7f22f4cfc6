// Command coredns is CoreDNS with only the plugins the local cluster's DNS
// needs (bench/cluster): Services and pods by name from the API, nothing
// forwarded, as nothing outside the cluster is reachable from it. Its own
// module, so CoreDNS's dependencies do not move the versions the reference
// Kubernetes binaries in bench/tools are built with.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	// The plugin chain's order, as CoreDNS's own plugin.cfg orders these.
	dnsserver.Directives = []string{"ready", "health", "errors", "cache", "kubernetes"}
	coremain.Run()
}
