// Package preview is the stand-in for a proxy mode that is not implemented
// yet: it programs nothing and logs, per sync, the service ports the real mode
// would program. kproxy says plainly at start that it runs in this state.
package preview

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Mode logs what the named mode would program.
type Mode struct {
	name   mode.Name
	logger klog.Logger
}

// New returns a preview of the mode called name.
func New(name mode.Name, logger klog.Logger) *Mode {
	return &Mode{name: name, logger: logger.WithValues("mode", name, "preview", true)}
}

func (m *Mode) Name() mode.Name { return m.name }

// Sync logs every changed service port (all of them on a full sync) and the
// ones removed; it never fails.
func (m *Mode) Sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	logged := 0
	if changes.Full {
		for _, sp := range snap.All() {
			m.logger.Info("Would program service port", Describe(sp)...)
			logged++
		}
	} else {
		for _, name := range changes.Changed {
			if sp, ok := snap.Get(name); ok {
				m.logger.Info("Would program service port", Describe(sp)...)
				logged++
			}
		}
	}
	for _, sp := range changes.Removed {
		m.logger.Info("Would remove service port", "servicePort", sp.Name.String())
	}
	m.logger.Info("Sync finished without programming anything: this mode is not implemented yet",
		"generation", snap.Generation, "servicePorts", snap.Len(), "full", changes.Full,
		"logged", logged, "removed", len(changes.Removed))
	return nil
}

// Close has nothing to stop.
func (m *Mode) Close() error { return nil }

// Describe renders a service port as structured-log key/value pairs.
func Describe(sp *servicemap.ServicePort) []any {
	kv := []any{"servicePort", sp.Name.String(), "clusterIPs", joinAny(sp.ClusterIPs), "port", sp.Port}
	if sp.NodePort != 0 {
		kv = append(kv, "nodePort", sp.NodePort)
	}
	if len(sp.ExternalIPs) > 0 {
		kv = append(kv, "externalIPs", joinAny(sp.ExternalIPs))
	}
	if len(sp.LoadBalancerIPs) > 0 {
		kv = append(kv, "loadBalancerIPs", joinAny(sp.LoadBalancerIPs))
	}
	if len(sp.LoadBalancerSourceRanges) > 0 {
		kv = append(kv, "sourceRanges", joinAny(sp.LoadBalancerSourceRanges))
	}
	if sp.AffinityTimeout > 0 {
		kv = append(kv, "clientIPAffinity", sp.AffinityTimeout.String())
	}
	if sp.InternalPolicyLocal {
		kv = append(kv, "internalTrafficPolicy", "Local")
	}
	if sp.ExternalPolicyLocal {
		kv = append(kv, "externalTrafficPolicy", "Local")
	}
	if sp.HealthCheckNodePort != 0 {
		kv = append(kv, "healthCheckNodePort", sp.HealthCheckNodePort)
	}
	eps := make([]string, 0, len(sp.Endpoints))
	for _, ep := range sp.Endpoints {
		eps = append(eps, describeEndpoint(ep))
	}
	return append(kv, "endpoints", strings.Join(eps, " "))
}

// describeEndpoint marks the states that change how an endpoint is used.
func describeEndpoint(ep servicemap.Endpoint) string {
	var flags []string
	if !ep.Ready {
		flags = append(flags, "not-ready")
	}
	if ep.Serving && !ep.Ready {
		flags = append(flags, "serving")
	}
	if ep.Terminating {
		flags = append(flags, "terminating")
	}
	if ep.IsLocal {
		flags = append(flags, "local")
	}
	if len(flags) == 0 {
		return ep.String()
	}
	return ep.String() + "(" + strings.Join(flags, ",") + ")"
}

func joinAny[T fmt.Stringer](items []T) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = it.String()
	}
	return strings.Join(s, ",")
}
