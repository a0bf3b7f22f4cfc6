//go:build deps_pin

// Temporary: keeps go.mod/go.sum complete while the packages are written.
package deps

import (
	_ "github.com/coreos/go-iptables/iptables"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/moby/ipvs"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/pflag"
	_ "github.com/vishvananda/netlink"
	_ "golang.org/x/sys/unix"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/discovery/v1"
	_ "k8s.io/apimachinery/pkg/util/validation"
	_ "k8s.io/apimachinery/pkg/util/yaml"
	_ "k8s.io/apimachinery/pkg/runtime/serializer"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/rest"
	_ "k8s.io/client-go/tools/cache"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/klog/v2"
	_ "k8s.io/kube-proxy/config/v1alpha1"
	_ "sigs.k8s.io/yaml"
)
