// Package e2e is kproxy's end-to-end suite. Every case runs the real kproxy
// binary once per proxy mode (subtests named after the mode, such as
// TestClusterIP/iptables) on the network-namespace lab of bench/lab: a client
// host, the node running kproxy, and three backends running real servers.
// kproxy is fed a services file, or a real kube-apiserver in TestAPIServer.
//
// The package holds tests only; run them as root:
//
//	go test ./bench/e2e/ -run 'TestClusterIP' -count=1 -v
package e2e
