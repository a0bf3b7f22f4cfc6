// Command kcluster brings up and removes the local Kubernetes cluster of
// make cluster (see package kproxy.dev/kproxy/bench/cluster):
//
//	kcluster up [-nodes N] [-dir DIR] [-tools DIR] [-image FILE] [-manifest FILE] [-api-port PORT]
//	            [-images DIR] [-coredns FILE]
//	kcluster down [-dir DIR]
//
// and holds what the cluster's own processes run: run-in starts a program
// in a cgroup and namespaces, forward relays the host's API port.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"kproxy.dev/kproxy/bench/cluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kcluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kcluster up|down|run-in|forward [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	dir := fs.String("dir", cluster.DefaultStateDir, "state directory")
	switch args[0] {
	case "up":
		nodes := fs.Int("nodes", 2, "number of nodes")
		tools := fs.String("tools", "bench/tools/bin", "directory with kube-apiserver, etcd, kubelet, kube-controller-manager, kube-scheduler")
		image := fs.String("image", "bin/kproxy-image.oci.tar", "kproxy's OCI archive (make image)")
		manifest := fs.String("manifest", "deploy/base/kproxy.yaml", "kproxy's manifest")
		port := fs.Int("api-port", cluster.DefaultAPIPort, "host loopback port for the API server")
		images := fs.String("images", "", "directory of OCI archives (*.oci.tar) to import into every node")
		coredns := fs.String("coredns", "", "static CoreDNS binary: run it as the cluster DNS")
		pauseNames := fs.String("pause-names", "", "comma-separated further names of the pause image (the ones e2e.test's pods name)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding kcluster's own binary: %w", err)
		}
		root, err := os.Getwd()
		if err != nil {
			return err
		}
		cfg := cluster.Config{Nodes: *nodes, StateDir: abs(*dir), ToolsBin: abs(*tools), Image: abs(*image),
			Manifest: abs(*manifest), RepoRoot: root, APIPort: *port, Self: self,
			Images: absOrEmpty(*images), CoreDNS: absOrEmpty(*coredns), PauseNames: splitList(*pauseNames)}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return cluster.Up(ctx, cfg, os.Stdout)
	case "down":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return cluster.Down(abs(*dir), os.Stdout)
	case "run-in":
		cgroup := fs.String("cgroup", "", "cgroup to join, relative to each hierarchy's root")
		netns := fs.String("netns", "", "network namespace to enter (a path)")
		hostname := fs.String("hostname", "", "hostname in a new UTS namespace")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return cluster.RunIn(*cgroup, *netns, *hostname, fs.Args())
	case "forward":
		listen := fs.String("listen", "", "address to listen on")
		netns := fs.String("netns", "", "network namespace to connect from (a path)")
		to := fs.String("to", "", "address to connect to")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return cluster.Forward(ctx, *listen, *netns, *to)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

func absOrEmpty(p string) string {
	if p == "" {
		return ""
	}
	return abs(p)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
