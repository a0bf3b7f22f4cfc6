// Package conformance runs upstream Kubernetes' own sig-network specs (the
// e2e.test binary make conformance-tools builds from bench/tools' module)
// against the local cluster of bench/cluster, and reports each spec's
// result: a run's JUnit report read into Specs, a matrix of specs × node
// proxy configurations (Report, as Markdown and JSON), and the specs whose
// result changed between two such reports (Compare). Swapping the node
// proxy between configurations is bench/cluster/proxies' job.
//
// The cluster must run the cluster DNS and hold the specs' images (kcluster
// up -coredns and -images; images.sh builds them without a registry): pods
// cannot pull, and most Services specs reach a Service by its name.
package conformance
