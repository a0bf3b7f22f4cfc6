// Command ipvsref runs kube-proxy v1.36's IPVS proxier once, as a library,
// on the objects of a services file (the multi-document YAML that kproxy's
// --services-file reads: Node, Service and EndpointSlice objects), and
// exits when that first sync is done. It leaves behind what kube-proxy
// programs (virtual servers, kube-ipvs0 addresses, ipsets, iptables rules)
// so that a test can compare it with kproxy's --proxy-mode=ipvs on the same
// objects (kproxy.dev/kproxy/bench/ipvsref). No API server is needed, which
// matters in the slow guest kernel those tests run in.
//
// Run it as root inside a network namespace made for it: it changes the
// kernel state of the namespace it runs in. iptables, ip6tables (with their
// -save and -restore) and ipset are taken from PATH, as kube-proxy does.
//
// Exit status: 0 when the sync finished without the proxier logging an
// error, 1 when it did not (the errors are listed), 2 for bad flags or input.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// usageError marks a problem with the flags or the services file.
type usageError struct{ error }

func main() {
	err := run(os.Args[1:], os.Stderr)
	var usage usageError
	switch {
	case err == nil:
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "ipvsref: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "ipvsref: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, logOut io.Writer) error {
	fs := flag.NewFlagSet("ipvsref", flag.ContinueOnError)
	fs.SetOutput(logOut)
	servicesFile := fs.String("services-file", "", "services file: YAML documents holding Node, Service and EndpointSlice objects (required)")
	var cfg config
	fs.StringVar(&cfg.nodeName, "hostname-override", "", "this node's name: endpoints on it are local (required)")
	fs.StringVar(&cfg.nodeIP, "node-ip", "", "this node's IP (default: the Node object's, else loopback; kube-proxy's --bind-address)")
	fs.StringVar(&cfg.scheduler, "ipvs-scheduler", "", "IPVS scheduler (default rr)")
	fs.BoolVar(&cfg.masqueradeAll, "masquerade-all", false, "SNAT all service traffic")
	fs.IntVar(&cfg.masqueradeBit, "iptables-masquerade-bit", 14, "fwmark bit for packets to SNAT")
	clusterCIDRs := fs.String("cluster-cidr", "", "comma-separated pod CIDRs (detect-local-mode ClusterCIDR)")
	nodePortAddresses := fs.String("nodeport-addresses", "", "comma-separated CIDRs of the addresses NodePorts open on (default all)")
	fs.BoolVar(&cfg.ipv4Only, "ipv4-only", false, "run the IPv4 proxier only (default: dual-stack when ip6tables and the kernel have IPv6, as kube-proxy decides)")
	verbosity := fs.Int("v", 2, "log verbosity")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *servicesFile == "" || cfg.nodeName == "" {
		return usageError{errors.New("-services-file and -hostname-override are required")}
	}
	cfg.clusterCIDRs = splitList(*clusterCIDRs)
	cfg.nodePortAddresses = splitList(*nodePortAddresses)

	objs, err := readObjects(*servicesFile)
	if err != nil {
		return usageError{err}
	}
	objs = objs.proxied()

	errs := &errorLog{}
	logger := newRecordingLogger(textlogger.NewLogger(textlogger.NewConfig(
		textlogger.Verbosity(*verbosity), textlogger.Output(logOut))), errs)
	// The proxier logs both through its context's logger and through
	// klog's global functions; both must reach the recorder.
	klog.SetLogger(logger)
	ctx := klog.NewContext(context.Background(), logger)

	ps, err := newProxier(ctx, cfg, objs.node(cfg.nodeName))
	if err != nil {
		return err
	}
	if err := syncOnce(ps, objs, cfg.nodeName); err != nil {
		return err
	}
	if logged := errs.Errors(); len(logged) > 0 {
		return fmt.Errorf("the sync finished, but the proxier logged %d error(s):\n  %s", len(logged), strings.Join(logged, "\n  "))
	}
	logger.Info("First sync done", "services", len(objs.services), "endpointSlices", len(objs.slices), "families", ps.families)
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
