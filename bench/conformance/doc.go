// Package conformance runs upstream Kubernetes' own conformance specs (the
// e2e.test binary make conformance-tools builds from bench/tools' module)
// against kproxy in the local cluster of bench/cluster, and reports each
// spec's result as a Markdown table next to the framework's JUnit report.
//
// The cluster must run the cluster DNS and hold the specs' images (kcluster
// up -coredns and -images; images.sh builds them without a registry): pods
// cannot pull, and most Services specs reach a Service by its name.
package conformance
