// Command etcd is the etcd server, built from the Go module proxy so tests can
// run a real kube-apiserver without a system etcd package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
