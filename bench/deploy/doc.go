// Package deploy checks the manifests in deploy/ that swap kproxy in for
// kube-proxy: that the real kube-apiserver accepts them (server-side apply,
// dry run), that they differ from the kube-proxy add-on kubeadm v1.36.3
// generates only where a table of intended differences says so, and that
// kproxy bootstraps from the ConfigMap's kubeconfig and configuration.
//
// Compare and Parse are the non-test part: the field-by-field walk over two
// sets of manifests, with the ConfigMap's embedded kubeconfig and
// KubeProxyConfiguration compared field by field too.
package deploy
