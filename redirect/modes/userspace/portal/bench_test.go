package portal

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// BenchmarkBuildAndRender measures a full sync's rule computation for 5,000
// NodePort services with one external IP each: Build plus the restore
// payload, with all, a tenth or none of them refusing for want of endpoints.
func BenchmarkBuildAndRender(b *testing.B) {
	var svcs []*v1.Service
	for i := range 5000 {
		ip := fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)
		svcs = append(svcs, service("bench", fmt.Sprintf("svc-%d", i), func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
			s.Spec.ExternalIPs = []string{fmt.Sprintf("198.18.%d.%d", 100+i/250, i%250+1)}
		}, catalogue.Port("http", v1.ProtocolTCP, 80, int32(30000+i%2768))))
	}
	snap := snapshotOf(b, svcs...)
	for _, tc := range []struct {
		name string
		// every is how often a service port has no endpoints (0: never).
		every int
	}{{"all-served", 0}, {"every-10th-without-endpoints", 10}, {"none-served", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			portals := PortalsFrom(snap, sequentialProxyPorts(snap, false))
			for i := range portals {
				if tc.every > 0 && i%tc.every == 0 {
					portals[i].Endpoints = ClassEndpoints{Internal: NoEndpoints, External: NoEndpoints}
				}
			}
			b.ReportAllocs()
			var size int
			for b.Loop() {
				rs, err := Build(ipfamily.IPv4, testNode, portals)
				if err != nil {
					b.Fatal(err)
				}
				size = len(Payload(rs, nil))
			}
			b.ReportMetric(float64(size), "payload-bytes")
		})
	}
}
