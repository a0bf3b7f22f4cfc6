// Package testkit is the tests' shared kit for the proxy modes: builders of
// service-map ports, endpoints and snapshots (ports.go), one golden-file
// helper (golden.go), and, in the catalogue subpackage, the named Service
// and EndpointSlice scenarios that every mode renders into its own golden
// files.
//
// Fixture addresses follow DEVELOPERS.md: service VIPs in 198.18.0.0/16,
// the node and pods in 198.19.0.0/16 (pods in 198.19.1.0/24), IPv6 under
// fd00:: (VIPs fd00:18::/64, node fd00:19::1, pods fd00:19:1::/64).
//
// It is test tooling: only _test.go files import it.
package testkit
