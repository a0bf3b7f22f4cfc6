# kproxy — build, test, demo, benchmarks. `sudo make test` and `sudo make demo`
# work on a fresh Debian 12 machine: they install what they need first.
SHELL := /bin/bash
# sudo's secure_path drops /usr/local/go/bin, where Go lives.
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
TEST_TIMEOUT ?= 30m
# The guest kernel's suites take about 10 minutes alone, 15 beside the
# others, and past 30 with two busy loops beside them all.
GUEST_TEST_TIMEOUT ?= 60m
# Reference binaries (kube-apiserver, etcd, kube-proxy, kubeadm) built from the Go
# module proxy; see DEVELOPERS.md.
TOOLS_BIN := $(CURDIR)/bench/tools/bin
export KPROXY_TOOLS_BIN := $(TOOLS_BIN)
# The plots of make bench-modes and the check of .ci/programs against the
# code: a module of its own, whose gonum/plot and golang.org/x/tools stay
# out of kproxy's go.mod (DEVELOPERS.md).
ANALYSIS := $(CURDIR)/bench/analysis

.PHONY: all build print-version-ldflags deps tools test test-guest test-host test-host-slow test-e2e-legacy test-race test-guest-pkgs test-guest-nonf test-guest-nonf-self unit race demo bench bench-dataplane bench-dataplane-scale bench-syncscale bench-ipvs bench-modes bench-compare image image-arm64 kube-proxy-image conformance-compare cluster-tools cluster cluster-down cluster-smoke conformance-tools conformance-images conformance lint clean

all: build

# The revision kproxy is built from, for `kproxy --version` and
# kubernetes_build_info (sync/buildinfo): stamped here because the Go
# toolchain stamps nothing with -buildvcs=false or in a git worktree.
# VERSION=v1.2.3 sets the version itself.
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
GIT_TREE_STATE := $(shell if [ -z "$(GIT_COMMIT)" ]; then :; elif git diff --quiet HEAD 2>/dev/null; then echo clean; else echo dirty; fi)
GIT_COMMIT_TIME := $(shell TZ=UTC git show -s --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd HEAD 2>/dev/null)
BUILD_DATE := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO := kproxy.dev/kproxy/sync/buildinfo
VERSION_LDFLAGS := -X $(BUILDINFO).gitCommit=$(GIT_COMMIT) -X $(BUILDINFO).gitTreeState=$(GIT_TREE_STATE) \
	-X $(BUILDINFO).commitTime=$(GIT_COMMIT_TIME) -X $(BUILDINFO).buildDate=$(BUILD_DATE) \
	$(if $(VERSION),-X $(BUILDINFO).gitVersion=$(VERSION))

build:
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o bin/kproxy ./cmd/kproxy

# The linker flags above, for tests that build kproxy as `make build` does.
print-version-ldflags:
	@echo '$(VERSION_LDFLAGS)'

deps:
	./.ci/install-deps

# Incremental: after the first ~10-minute build the Go build cache makes this quick.
# The version stamp makes `kube-proxy --version` report what it is.
K8S_VERSION := v1.36.3
K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36
PROGRESS := $(CURDIR)/.ci/progress
tools: deps
	@cd bench/tools && $(PROGRESS) "make tools: building kube-apiserver, kube-proxy, kubeadm, etcd and ipvsref from the Go module proxy" \
		"about 13 minutes on 2 cores the first time, seconds once the Go build cache has them" \
		$(GO) build -ldflags "$(K8S_LDFLAGS)" -o bin/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubeadm ./etcd ./ipvsref

# The rest of a Kubernetes cluster for make cluster, from the same module as
# make tools but apart from it, so make test does not wait for them.
CLUSTER_TOOLS := k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
cluster-tools: deps
	@cd bench/tools && $(PROGRESS) "make cluster-tools: building kubelet, kube-controller-manager, kube-scheduler and kubectl from the Go module proxy" \
		"about 5 minutes on 2 cores the first time, seconds once the Go build cache has them" \
		$(GO) build -ldflags "$(K8S_LDFLAGS)" -o bin/ $(CLUSTER_TOOLS)

# A local Kubernetes cluster (bench/cluster): CLUSTER_NODES nodes (2 or 3;
# up to 9), each a network namespace with its own containerd and kubelet,
# the control plane in a router namespace, kproxy as its DaemonSet from
# make image's image through deploy/base/kproxy.yaml. About 25 s once everything
# is built; prints the kubeconfig and a kubectl command. CLUSTER_IMAGE=FILE
# uses that kproxy archive instead of building one. make cluster-down removes
# every trace; make cluster-smoke checks Service traffic in it.
CLUSTER_NODES ?= 2
CLUSTER_DIR ?= /var/tmp/kproxy-cluster
CLUSTER_API_PORT ?= 16443
CLUSTER_IMAGE ?=
# CLUSTER_IMAGES=DIR imports every OCI archive in DIR into each node;
# CLUSTER_COREDNS=FILE runs that CoreDNS binary as the cluster DNS (make
# conformance sets both).
CLUSTER_IMAGES ?=
CLUSTER_COREDNS ?=
KCLUSTER := $(CURDIR)/bin/kcluster
cluster: tools cluster-tools $(if $(CLUSTER_IMAGE),,image)
	@if [ "$$(id -u)" != 0 ]; then echo "make cluster needs root (namespaces, cgroups, containerd): run sudo make cluster"; exit 1; fi
	$(GO) build -o $(KCLUSTER) ./bench/cluster/cmd/kcluster
	$(KCLUSTER) up -nodes $(CLUSTER_NODES) -dir $(CLUSTER_DIR) -api-port $(CLUSTER_API_PORT) -tools $(TOOLS_BIN) \
		-image $(or $(CLUSTER_IMAGE),$(IMAGE)) -manifest $(CURDIR)/deploy/base/kproxy.yaml \
		$(if $(CLUSTER_IMAGES),-images $(CLUSTER_IMAGES)) $(if $(CLUSTER_COREDNS),-coredns $(CLUSTER_COREDNS)) \
		$(if $(CLUSTER_PAUSE_NAMES),-pause-names $(CLUSTER_PAUSE_NAMES))

cluster-down:
	@if [ "$$(id -u)" != 0 ]; then echo "make cluster-down needs root: run sudo make cluster-down"; exit 1; fi
	$(GO) build -o $(KCLUSTER) ./bench/cluster/cmd/kcluster
	$(KCLUSTER) down -dir $(CLUSTER_DIR)

# A Deployment of HTTP servers behind a ClusterIP and a NodePort Service in
# the cluster make cluster brought up, asked from a pod and from another node.
cluster-smoke:
	@if [ "$$(id -u)" != 0 ]; then echo "make cluster-smoke needs root (it asks from a node's namespace): run sudo make cluster-smoke"; exit 1; fi
	KPROXY_CLUSTER=1 KPROXY_CLUSTER_DIR=$(CLUSTER_DIR) $(GO) test -count=1 -v -run '^TestSmoke$$' ./bench/cluster/

# Upstream's own conformance specs against kproxy and the reference
# kube-proxy (bench/conformance, bench/cluster/proxies).
# make conformance-tools builds upstream's e2e test binary (go test -c of
# k8s.io/kubernetes/test/e2e, about 9 minutes on 2 cores the first time, 22
# on one shared core),
# the ginkgo command, agnhost and a CoreDNS with only the plugins the cluster needs
# (bench/tools/coredns, its own module) into bench/tools/bin; make
# conformance-images builds the images the specs run (agnhost, busybox, glibc-dns-testing) from
# Debian's packages under the names e2e.test expects, in
# bin/conformance-images (about a minute, and again only when agnhost, the
# script or the names change; needs root); make kube-proxy-image builds the
# reference kube-proxy v1.36.3's image with make image's recipe.
# make conformance brings up a cluster of CONFORMANCE_NODES nodes (3: one
# spec needs three) with them and the cluster DNS unless one is up, then,
# in that one cluster, one configuration after the other, swaps the node
# proxy's DaemonSet to each of CONFORMANCE_PROXIES (default all: kproxy in
# iptables mode on the nf_tables and the legacy backend, nftables,
# userspace with REDIRECT, local and socket-lookup portals; kube-proxy in
# iptables and nftables modes; the IPVS ones are reported as not run on a
# kernel without IPVS) and runs the specs CONFORMANCE_SPECS selects:
# services (the 15 Services conformance specs, about 3 minutes a
# configuration), conformance (the 47 sig-network conformance specs, the
# default), wide (98: every Services, EndpointSlice and Networking Granular
# Checks: Services spec besides those, without [Serial] and [Disruptive];
# hours for all configurations) or serial (the [Serial] and [Disruptive]
# ones that can run here); CONFORMANCE_FOCUS=RE and CONFORMANCE_SKIP=RE
# replace the selection's expressions; CONFORMANCE_PROCS=N runs N e2e.test
# processes side by side (ginkgo's parallel mode; [Serial] specs still run
# alone).
# bench/conformance/SPECS.md lists the [Serial] and [Disruptive] specs and
# which can run here. It writes CONFORMANCE_OUT/conformance.md and .json
# (spec × configuration) and each configuration's JUnit report and e2e.log
# in CONFORMANCE_OUT/NAME, and leaves the cluster up with make cluster's
# kproxy again: make cluster-down. make conformance-compare OLD.json
# NEW.json lists the specs whose result changed between two runs.
E2E_TEST := $(TOOLS_BIN)/e2e.test
CONFORMANCE_IMAGES := $(CURDIR)/bin/conformance-images
CONFORMANCE_OUT ?= $(CURDIR)/bin/conformance
CONFORMANCE_NODES ?= 3
CONFORMANCE_PROXIES ?= all
CONFORMANCE_SPECS ?= conformance
CONFORMANCE_FOCUS ?=
CONFORMANCE_SKIP ?=
CONFORMANCE_PROCS ?= 1
KUBE_PROXY_IMAGE := $(CURDIR)/bin/kube-proxy-image.oci.tar
conformance-tools: deps
	@cd bench/tools && $(PROGRESS) "make conformance-tools: building upstream's e2e.test from the Go module proxy" \
		"about 9 minutes on 2 cores the first time, seconds once the Go build cache has it" \
		$(GO) test -c -ldflags "$(K8S_LDFLAGS)" -o bin/e2e.test k8s.io/kubernetes/test/e2e
	cd bench/tools && $(GO) build -o bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo
	cd bench/tools && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/agnhost k8s.io/kubernetes/test/images/agnhost
	cd bench/tools/coredns && CGO_ENABLED=0 $(GO) build -trimpath -o ../bin/coredns .

conformance-images: conformance-tools
	@if [ "$$(id -u)" != 0 ]; then echo "make conformance-images needs root (mmdebstrap's root mode): run sudo make conformance-images"; exit 1; fi
	@images=$$($(E2E_TEST) --list-images) || exit 1; \
	agnhost=$$(grep -x 'registry.k8s.io/e2e-test-images/agnhost:.*' <<<"$$images" | sort); \
	busybox=$$(grep -x -e 'registry.k8s.io/e2e-test-images/busybox:.*' -e 'registry.k8s.io/e2e-test-images/glibc-dns-testing:.*' <<<"$$images" | sort); \
	source=$$(cd bench/tools && $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost || exit 1; \
	inputs=$$(sha256sum $(TOOLS_BIN)/agnhost bench/conformance/images.sh; echo $$agnhost $$busybox $$source); \
	if [ "$$inputs" = "$$(cat $(CONFORMANCE_IMAGES)/inputs 2>/dev/null)" ]; then echo "$(CONFORMANCE_IMAGES) is up to date"; exit 0; fi; \
	AGNHOST_IMAGES="$$agnhost" BUSYBOX_IMAGES="$$busybox" AGNHOST_SOURCE="$$source" ./bench/conformance/images.sh $(TOOLS_BIN)/agnhost $(CONFORMANCE_IMAGES) && \
	echo "$$inputs" >$(CONFORMANCE_IMAGES)/inputs

kube-proxy-image: deps tools
	@if [ "$$(id -u)" != 0 ]; then echo "make kube-proxy-image needs root (mmdebstrap's root mode): run sudo make kube-proxy-image"; exit 1; fi
	cd bench/tools && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(K8S_LDFLAGS)" -o $(CURDIR)/bin/image/kube-proxy k8s.io/kubernetes/cmd/kube-proxy
	@inputs=$$(sha256sum bin/image/kube-proxy deploy/image/build.sh); \
	if [ -e $(KUBE_PROXY_IMAGE) ] && [ "$$inputs" = "$$(cat $(KUBE_PROXY_IMAGE).inputs 2>/dev/null)" ]; then echo "$(KUBE_PROXY_IMAGE) is up to date"; exit 0; fi; \
	IMAGE=localhost/kube-proxy:$(K8S_VERSION) NAME=kube-proxy DESCRIPTION="kube-proxy $(K8S_VERSION), the reference of make conformance" \
		./deploy/image/build.sh bin/image/kube-proxy $(KUBE_PROXY_IMAGE) && echo "$$inputs" >$(KUBE_PROXY_IMAGE).inputs

conformance: conformance-images kube-proxy-image $(if $(CLUSTER_IMAGE),,image)
	@if [ "$$(id -u)" != 0 ]; then echo "make conformance needs root (the cluster): run sudo make conformance"; exit 1; fi
	@if [ ! -e $(CLUSTER_DIR) ]; then \
		pause=$$($(E2E_TEST) --list-images | grep '/pause:' | paste -sd,) || exit 1; \
		$(MAKE) --no-print-directory cluster CLUSTER_NODES=$(CONFORMANCE_NODES) CLUSTER_IMAGES=$(CONFORMANCE_IMAGES) CLUSTER_COREDNS=$(TOOLS_BIN)/coredns CLUSTER_PAUSE_NAMES="$$pause" || exit 1; fi
	$(GO) build -o bin/kconformance ./bench/conformance/cmd/kconformance
	bin/kconformance -dir $(CLUSTER_DIR) -tools $(TOOLS_BIN) -out $(CONFORMANCE_OUT) -proxies '$(CONFORMANCE_PROXIES)' \
		-specs $(CONFORMANCE_SPECS) $(if $(CONFORMANCE_FOCUS),-focus '$(CONFORMANCE_FOCUS)') $(if $(CONFORMANCE_SKIP),-skip '$(CONFORMANCE_SKIP)') -procs $(CONFORMANCE_PROCS) \
		-kproxy bin/image/kproxy -kproxy-image $(or $(CLUSTER_IMAGE),$(IMAGE)) -kube-proxy bin/image/kube-proxy -kube-proxy-image $(KUBE_PROXY_IMAGE) \
		-commit '$(GIT_COMMIT)$(if $(filter dirty,$(GIT_TREE_STATE)), (dirty))' \
		-command 'make conformance CONFORMANCE_PROXIES=$(CONFORMANCE_PROXIES) CONFORMANCE_SPECS=$(CONFORMANCE_SPECS)$(if $(CONFORMANCE_FOCUS), CONFORMANCE_FOCUS=…)$(if $(CONFORMANCE_SKIP), CONFORMANCE_SKIP=…)$(if $(filter-out 1,$(CONFORMANCE_PROCS)), CONFORMANCE_PROCS=$(CONFORMANCE_PROCS))'

# Two make conformance runs: the specs whose result changed, per
# configuration. make conformance-compare OLD.json NEW.json, or OLD=… NEW=….
ifeq (conformance-compare,$(firstword $(MAKECMDGOALS)))
CONFORMANCE_COMPARE_FILES := $(wordlist 2,3,$(MAKECMDGOALS))
OLD ?= $(word 1,$(CONFORMANCE_COMPARE_FILES))
NEW ?= $(word 2,$(CONFORMANCE_COMPARE_FILES))
$(eval $(CONFORMANCE_COMPARE_FILES):;@:)
endif
conformance-compare:
	@if [ -z "$(OLD)" ] || [ -z "$(NEW)" ]; then echo "usage: make conformance-compare OLD.json NEW.json (or OLD=… NEW=…)"; exit 2; fi
	@$(GO) run ./bench/conformance/cmd/kconformance compare $(OLD) $(NEW)

# Everything: unit tests, kernel tests in throwaway network namespaces, and the
# real kube-apiserver + etcd tests. Needs root. KPROXY_REQUIRE_PROGRAMS makes
# bench/analysis/programs check that every program .ci/programs lists is
# installed; KPROXY_IMAGE makes bench/image test the image `make image` just built
# (without it, bench/image skips when there is no image). Then, alone on the
# machine, a 2-node cluster as make cluster brings it up, with kproxy as its
# DaemonSet: TestSmoke's Service traffic from a pod and from another node,
# and the 15 Services conformance specs (bench/cluster,
# TestClusterDaemonSetAndConformance, KPROXY_CLUSTER_TEST=1); it needs
# make cluster-tools and make conformance-images (e2e.test: about 9 minutes
# on a cold Go build cache) and no cluster of make cluster up.
RACE_PKGS := ./sync/servicemap/ ./sync/runner/ ./sync/engine/ ./sync/filesource/ ./sync/clustersource/
# The suites below mostly wait (for kproxy to start and sync, for traffic,
# for a guest kernel's slow system calls: the host's end-to-end package used
# a quarter of one core over its 21 minutes), so make test runs them side by
# side, TEST_JOBS at a time, each suite's output printed whole when it ends.
# TEST_JOBS=1 runs them one after the other. With six, the four longest
# suites held four places to the end and the host's end-to-end shards
# queued behind the rest: with eight, all but the shortest start at once.
# (A guest is no waiting process: each used about a third of a core.)
TEST_JOBS ?= 8
# The host's end-to-end package runs as E2E_SHARDS processes, with its
# top-level tests dealt out by their time in E2E_COSTS (.ci/shard), so the
# shards end together (every test runs in network namespaces of its own, so
# the processes cannot meet).
E2E_SHARDS := 4
# HOST_NICE=nice -n 10 runs the host's suites below the guest kernels: a
# guest is slow on a busy host for want of prompt turns, not of CPU time,
# and niced host suites halve the guests' time. Off by default: the
# data-plane runs of bench/modes' tiny tests failed beside them.
HOST_NICE ?=
E2E_SHARD_TARGETS := $(foreach i,$(shell seq $(E2E_SHARDS)),test-e2e-$(i))
# Seconds per end-to-end case on the host, in the guest and in the guest
# without netfilter, measured under load: only the split uses them.
E2E_COSTS := $(CURDIR)/.ci/e2e-costs
SHARD := $(CURDIR)/.ci/shard
# Longest first, so the slowest suites start at once: test-host's slowest
# packages and the rest of it, then the guests'.
TEST_SUITES = test-host-slow test-host $(GUEST_E2E_TARGETS) $(GUEST_NONF_E2E_TARGETS) $(E2E_SHARD_TARGETS) test-guest-pkgs test-e2e-legacy test-guest-nonf-self test-race
test: deps tools build image cluster-tools conformance-images
	@if [ "$$(id -u)" != 0 ]; then echo "make test needs root (network namespaces, iptables): run sudo make test"; exit 1; fi
	@$(PROGRESS) "go vet ./..." "about 8 minutes on a cold Go build cache, under a minute after" $(GO) vet ./...
	@cd $(ANALYSIS) && $(PROGRESS) "go vet ./... in bench/analysis" "under a minute" $(GO) vet ./...
	@$(MAKE) --no-print-directory bin/guest-exec
	@rc=0; $(PROGRESS) "the test suites, $(TEST_JOBS) at a time: $(TEST_SUITES)" "about 15 minutes" \
		$(MAKE) --no-print-directory -k -j$(TEST_JOBS) --output-sync=target $(TEST_SUITES) || rc=$$?; \
	KPROXY_CLUSTER_TEST=1 KPROXY_IMAGE=$(IMAGE) KPROXY_CONFORMANCE_IMAGES=$(CONFORMANCE_IMAGES) \
		$(PROGRESS) "alone: a 2-node cluster with kproxy as its DaemonSet, Service traffic and the 15 Services conformance specs" \
		"about 3 minutes" $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^TestClusterDaemonSetAndConformance$$' ./bench/cluster/ || rc=$$?; \
	exit $$rc

# Every package but the end-to-end one (its shards are below) and the
# slowest ones (test-host-slow), then bench/analysis, its own module: the
# plots, and .ci/programs checked against the code and the machine.
test-host:
	@rc=0; KPROXY_REQUIRE_PROGRAMS=1 KPROXY_IMAGE=$(IMAGE) $(PROGRESS) "go test: unit, kernel (network namespaces) and tool tests" \
		"about 12 minutes, more on a cold Go build cache" \
		$(HOST_NICE) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -vx -e 'kproxy.dev/kproxy/bench/e2e' $(foreach p,$(HOST_SLOW_PKGS),-e 'kproxy.dev/kproxy/$(p)')) || rc=$$?; \
	cd $(ANALYSIS) && KPROXY_REQUIRE_PROGRAMS=1 $(PROGRESS) "go test in bench/analysis: the plots, the programs the code runs" \
		"about 3 minutes" $(HOST_NICE) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./... || rc=$$?; \
	exit $$rc

# test-host's slowest packages, in a suite of their own so that they start
# at once rather than queue behind the others (go test runs two packages
# at a time on two cores): bench/modes alone runs the benchmark's every host
# mode and boots a guest.
HOST_SLOW_PKGS := bench/modes bench/nftcompare bench/guest bench/lab
test-host-slow:
	@KPROXY_REQUIRE_PROGRAMS=1 $(PROGRESS) "go test: the benchmark's tiny runs, the rule comparison with kube-proxy, the guest and lab kits" \
		"about 8 minutes" $(HOST_NICE) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(addprefix ./,$(addsuffix /,$(HOST_SLOW_PKGS)))

test-e2e-%:
	@names=$$($(GO) test -list '^Test' ./bench/e2e/ | grep '^Test' | $(SHARD) $(E2E_COSTS) host $(E2E_SHARDS) $*) && \
	$(PROGRESS) "end-to-end cases, shard $*/$(E2E_SHARDS)" "about 6 minutes" \
		$(HOST_NICE) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run "^($$names)$$" ./bench/e2e/

test-e2e-legacy:
	@cases=$$(echo $(LEGACY_E2E_CASES) | tr ' ' '|') && \
	KPROXY_E2E_IPTABLES_BACKEND=legacy $(PROGRESS) "end-to-end cases on the legacy iptables backend" "about 5 minutes" \
		$(HOST_NICE) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run "^($$cases)$$" ./bench/e2e/

test-race:
	@$(PROGRESS) "go test -race on the sync packages" "about a minute" \
		$(HOST_NICE) $(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) $(RACE_PKGS)

# Tests that need a kernel with IPVS and SCTP (TestGuest*) run in a
# user-mode-linux guest kernel: bin/guest-exec boots one per test binary
# (see bench/guest/doc.go). Guest RAM is a file in /dev/shm, or in
# GUEST_TMPDIR when /dev/shm is no tmpfs with room for it.
GUEST_TEST_PKGS := ./bench/guest/ ./cmd/kproxy/ ./redirect/sklookup/ ./lb/sctprelay/ ./redirect/modes/ipvs/handles/ ./bench/ipvsscale/ ./bench/ipvsref/
GUEST_TMPDIR ?= /var/tmp
# End-to-end cases (bench/e2e) that also run in the guest kernel, in the
# IPVS mode, and the SCTP ones in every mode (only the guest kernel has
# SCTP). kproxy is built on the host. The nftables mode runs on the host
# only: the guest kernel has nf_tables without its ip/ip6 families
# (TestGuestNFTablesHasNoIPFamilies).
GUEST_E2E_CASES := TestClusterIP TestHairpinToLocalEndpoint TestNodePortAddressesPrimary TestWithoutTheNFTAndIPSetTools TestRefusals TestNodePortAndExternalIP TestAffinityAndEndpointChanges TestCleanupRestoresTables TestSCTP TestSCTPLoopsAreRefused TestGracefulTermination TestIPVSStartup TestDualStack TestUDPEndpointRemoval TestConntrackEndpointRemovalOnEveryDestination
# The guest's end-to-end cases run in GUEST_E2E_SHARDS guests side by side,
# dealt out by their time in E2E_COSTS.
GUEST_E2E_SHARDS := 2
# Cases that run on the host in the modes that write iptables rules with
# kproxy on the legacy backend, the guest kernel's only one (the guest ran
# them so, at about ten times the host's CPU time).
LEGACY_E2E_CASES := TestClusterIP TestUserspaceKeepsClientAddress TestHairpinToLocalEndpoint TestNodePortAddressesPrimary TestWithoutTheNFTAndIPSetTools TestRefusals TestNodePortAndExternalIP TestAffinityAndEndpointChanges TestCleanupRestoresTables TestDualStack TestUDPEndpointRemoval TestConntrackEndpointRemovalOnEveryDestination
GUEST_E2E_TARGETS := $(foreach i,$(shell seq $(GUEST_E2E_SHARDS)),test-guest-e2e-$(i))
# The cases that apply to the userspace mode also run in a guest booted
# without netfilter (no netfilter module, module loading disabled; see
# bench/guest/doc.go), like a node whose kernel lacks it: kproxy, given no
# --proxy-mode, must pick the userspace mode with socket-lookup portals there.
# TestAPIServer is not among them: what it adds, a real API server as the
# source, does not reach the kernel; the host runs it in every mode,
# socket-lookup portals among them; and etcd with kube-apiserver took
# minutes to start in this guest, past any bound on a busy machine.
GUEST_NONF_E2E_CASES := TestClusterIP TestUserspaceKeepsClientAddress TestRefusals TestNodePortAndExternalIP TestNodePortAddressesPrimary TestAffinityAndEndpointChanges TestUDPEndpointRemoval TestSCTP TestSCTPLoopsAreRefused TestDualStack TestCleanupRestoresTables TestLoadBalancerIngress TestPortalKind TestServiceAddressesNotAnnounced TestExternalTrafficPolicyLocal TestInternalTrafficPolicyLocal TestHealthCheckNodePort TestServiceAddressesAreIsolated TestExternalTrafficPolicyLocalShortCircuitsUDPFromTheNode TestUserspaceKeepsRoutedPodAddress
# They run in GUEST_NONF_SHARDS guests, after the guest's self-test without
# netfilter in one more.
GUEST_NONF_SHARDS := 2
GUEST_NONF_E2E_TARGETS := $(foreach i,$(shell seq $(GUEST_NONF_SHARDS)),test-guest-nonf-e2e-$(i))
GUEST_NONF_TARGETS := $(GUEST_NONF_E2E_TARGETS) test-guest-nonf-self
test-guest: deps tools build bin/guest-exec
	@$(MAKE) --no-print-directory -k -j$(TEST_JOBS) --output-sync=target $(GUEST_E2E_TARGETS) $(GUEST_NONF_TARGETS) test-guest-pkgs

bin/guest-exec: $(shell find bench/guest -name '*.go')
	$(GO) build -o bin/guest-exec ./bench/guest/cmd/guest-exec

test-guest-pkgs:
	@KPROXY_BINARY=$(CURDIR)/bin/kproxy TMPDIR=$(GUEST_TMPDIR) $(PROGRESS) "guest-kernel tests (user-mode-linux: IPVS, SCTP)" "about 2 minutes" \
		$(GO) test -count=1 -timeout $(GUEST_TEST_TIMEOUT) -exec $(CURDIR)/bin/guest-exec -run '^TestGuest' $(GUEST_TEST_PKGS)

test-guest-e2e-%:
	@cases=$$(tr ' ' '\n' <<<'$(GUEST_E2E_CASES)' | $(SHARD) $(E2E_COSTS) guest $(GUEST_E2E_SHARDS) $*) && \
	KPROXY_BINARY=$(CURDIR)/bin/kproxy TMPDIR=$(GUEST_TMPDIR) $(PROGRESS) "end-to-end cases in the guest kernel, shard $*/$(GUEST_E2E_SHARDS)" "about 10 minutes" \
		$(GO) test -count=1 -timeout $(GUEST_TEST_TIMEOUT) -exec $(CURDIR)/bin/guest-exec -run "^($$cases)$$" ./bench/e2e/

test-guest-nonf: $(GUEST_NONF_TARGETS)

test-guest-nonf-self:
	@TMPDIR=$(GUEST_TMPDIR) $(PROGRESS) "guest-kernel self-test without netfilter" "under a minute" \
		$(GO) test -count=1 -timeout $(GUEST_TEST_TIMEOUT) -exec "$(CURDIR)/bin/guest-exec -netfilter=false" -run '^TestGuest' ./bench/guest/

test-guest-nonf-e2e-%:
	@cases=$$(tr ' ' '\n' <<<'$(GUEST_NONF_E2E_CASES)' | $(SHARD) $(E2E_COSTS) nonf $(GUEST_NONF_SHARDS) $*) && \
	KPROXY_BINARY=$(CURDIR)/bin/kproxy TMPDIR=$(GUEST_TMPDIR) $(PROGRESS) "end-to-end cases in the guest kernel without netfilter, shard $*/$(GUEST_NONF_SHARDS)" "about 6 minutes" \
		$(GO) test -count=1 -timeout $(GUEST_TEST_TIMEOUT) -exec "$(CURDIR)/bin/guest-exec -netfilter=false" -run "^($$cases)$$" ./bench/e2e/

# Unit tests only (no root needed; kernel tests skip).
unit:
	$(GO) test -count=1 ./...
	cd $(ANALYSIS) && $(GO) test -count=1 ./...

# Builds the network-namespace lab, runs kproxy in userspace mode on
# deploy/samples/lab.yaml and shows traffic balanced and affinity held.
demo: deps
	@if [ "$$(id -u)" != 0 ]; then echo "make demo needs root (network namespaces, iptables): run sudo make demo"; exit 1; fi
	@report=$$(mktemp); \
	KPROXY_DEMO_REPORT=$$report $(GO) test -count=1 -run '^TestDemo$$' ./bench/demo/ >/dev/null || \
		{ $(GO) test -count=1 -v -run '^TestDemo$$' ./bench/demo/; exit 1; }; \
	cat $$report; rm -f $$report
	@echo; echo "== The data-plane benchmark table (about 2-4 minutes)"
	@mkdir -p bin
	@$(DATAPLANE_USERSPACE) >/dev/null 2>&1 || { echo "the benchmark failed: run make bench-dataplane"; exit 1; }
	@cat $(DATAPLANE_TABLE)

# The benchmarks: one entry, make bench-modes, whose BENCH (a comma-separated
# list) chooses what it measures, each into BENCH_MODES_OUT (bin/bench-modes);
# `all` is every one. They share bench/benchtable's page, table and machine
# description.
#   modes (the default): every mode side by side (bench/modes): kproxy's
#     userspace (both portal kinds), iptables (both backends) and nftables
#     modes and kube-proxy v1.36.3's iptables and nftables modes at 1, 1,000
#     and 10,000 services (KPROXY_BENCH_SIZES), control plane and data plane
#     against a hand-written DNAT rule, then the IPVS modes in the guest
#     kernel (KPROXY_BENCH_GUEST=off skips them). Under 30 minutes on 2
#     cores; leaves results.json, bench-modes.md and the plots (PNG, SVG).
#     The plots are drawn from results.json by bench/analysis's bench-plots,
#     a module of its own so that the plotting library stays out of
#     kproxy's go.mod.
#   syncscale: the sync cost against kube-proxy per proxy mode and size
#     (iptables-nft, iptables-legacy, nftables; KPROXY_SYNCSCALE_MODES to
#     choose) with both proxies' RSS (about 15 minutes with the default
#     sizes 100, 1,000 and 5,000; KPROXY_SYNCSCALE_SIZES=100,1000,5000,10000,30000
#     for the full table): syncscale-table.md.
#   ipvs: the IPVS sync cost, the desired-state build on the host and the
#     netlink apply in a guest kernel per size (about 2.5 minutes for 1,000
#     and 10,000 ports; KPROXY_IPVSSCALE_SIZES to choose): ipvs-table.md.
#   dataplane: the data-plane tables: direct, DNAT, kproxy userspace with
#     REDIRECT, local and socket-lookup portals, a Go io.Copy relay and
#     HAProxy in one lab (medians of DATAPLANE_ROUNDS rounds, about 7
#     minutes for 3; make demo measures one): dataplane-table.md; the
#     iptables and nftables modes' against a hand-written DNAT rule, each in
#     a lab of its own as the modes cannot share a node:
#     dataplane-iptables-table.md, dataplane-nftables-table.md.
#   dataplane-scale: new-connection requests and new UDP flows per second
#     through one service with 1 and 10,000 services programmed
#     (KPROXY_DATAPLANE_SCALE=10000,30000 adds 30,000), for kube-proxy-shaped
#     DNAT, kproxy's iptables and nftables modes and its userspace mode with
#     REDIRECT and with local portals, each on a fresh node; medians of
#     DATAPLANE_ROUNDS rounds (6-8 minutes for 3 on 2 cores, where
#     RLIMIT_NOFILE 20000 also adds 5,000 services: the userspace paths
#     cannot hold 10,000): dataplane-scale-table.md.
# make bench runs every package's micro-benchmarks, then make bench-modes
# BENCH=all. bench-syncscale, bench-ipvs, bench-dataplane and
# bench-dataplane-scale are make bench-modes with that BENCH.
BENCH ?= modes
BENCH_ALL := modes syncscale ipvs dataplane dataplane-scale
BENCH_CELLS = $(if $(filter all,$(subst $(COMMA), ,$(BENCH))),$(BENCH_ALL),$(subst $(COMMA), ,$(BENCH)))
COMMA := ,
BENCH_MODES_OUT ?= $(CURDIR)/bin/bench-modes
BENCH_OUT = $(abspath $(BENCH_MODES_OUT))
DATAPLANE_ROUNDS ?= 3
# make demo's one round of the userspace data-plane table.
DATAPLANE_TABLE := $(CURDIR)/bin/dataplane-table.md
DATAPLANE_BENCH = $(GO) test -run '^$$' -bench '^BenchmarkDataPlane$$' -benchtime 1x -timeout 20m ./bench/dataplane/
DATAPLANE_USERSPACE = KPROXY_BENCH_TABLE=$(DATAPLANE_TABLE) $(DATAPLANE_BENCH)
bench: deps tools
	$(GO) test -run '^$$' -bench . -benchmem $$($(GO) list ./... | grep -v -e /bench/dataplane -e /bench/syncscale -e /bench/ipvsscale -e /bench/modes)
	$(MAKE) --no-print-directory bench-modes BENCH=all

bench-modes: deps tools build
	@for c in $(BENCH_CELLS); do case " $(BENCH_ALL) " in *" $$c "*) ;; *) echo "BENCH=$(BENCH): $$c is not one of all $(BENCH_ALL)"; exit 2;; esac; done
	@mkdir -p $(BENCH_OUT)
	@for c in $(BENCH_CELLS); do $(MAKE) --no-print-directory bench-cell-$$c || exit 1; done
	@echo "Written to $(BENCH_OUT)"

bench-syncscale bench-ipvs bench-dataplane-scale: bench-%:
	@$(MAKE) --no-print-directory bench-modes BENCH=$*
bench-dataplane:
	@$(MAKE) --no-print-directory bench-modes BENCH=dataplane,dataplane-scale

bench-cell-modes:
	$(GO) build -o bin/guest-exec ./bench/guest/cmd/guest-exec
	KPROXY_BINARY=$(CURDIR)/bin/kproxy KPROXY_GUEST_EXEC=$(CURDIR)/bin/guest-exec KPROXY_BENCH_OUT=$(BENCH_OUT) TMPDIR=$(GUEST_TMPDIR) \
		$(GO) test -run '^$$' -bench '^BenchmarkModes$$' -benchtime 1x -timeout 0 ./bench/modes/
	cd $(ANALYSIS) && $(GO) run ./cmd/bench-plots $(BENCH_OUT)/results.json

bench-cell-syncscale:
	KPROXY_BENCH_TABLE=$(BENCH_OUT)/syncscale-table.md $(GO) test -run '^$$' -bench SyncScale -benchtime 1x -timeout 0 ./bench/syncscale/
	@cat $(BENCH_OUT)/syncscale-table.md

bench-cell-ipvs:
	KPROXY_BENCH_TABLE=$(BENCH_OUT)/ipvs-table.md TMPDIR=$(GUEST_TMPDIR) $(GO) test -run '^$$' -bench '^BenchmarkIPVSScale$$' -benchtime 1x -timeout 30m ./bench/ipvsscale/
	@cat $(BENCH_OUT)/ipvs-table.md

bench-cell-dataplane:
	KPROXY_DATAPLANE_ROUNDS=$(DATAPLANE_ROUNDS) KPROXY_BENCH_TABLE=$(BENCH_OUT)/dataplane-table.md $(DATAPLANE_BENCH)
	@cat $(BENCH_OUT)/dataplane-table.md
	@for mode in iptables nftables; do \
		KPROXY_DATAPLANE_KPROXY_MODE=$$mode KPROXY_DATAPLANE_PATHS=direct,kproxy-$$mode KPROXY_DATAPLANE_ROUNDS=3 \
			KPROXY_BENCH_TABLE=$(BENCH_OUT)/dataplane-$$mode-table.md $(DATAPLANE_BENCH) && \
		cat $(BENCH_OUT)/dataplane-$$mode-table.md || exit 1; \
	done

bench-cell-dataplane-scale:
	KPROXY_DATAPLANE_ROUNDS=$(DATAPLANE_ROUNDS) KPROXY_BENCH_TABLE=$(BENCH_OUT)/dataplane-scale-table.md \
		$(GO) test -run '^$$' -bench '^BenchmarkDataPlaneScale$$' -benchtime 1x -timeout 90m ./bench/dataplane/
	@cat $(BENCH_OUT)/dataplane-scale-table.md

# Two bench-modes runs: the figures that moved by more than the noise
# measured in the runs. make bench-compare OLD NEW, or OLD=… NEW=…: the two
# words after the goal are taken as the files (and not built as goals).
ifeq (bench-compare,$(firstword $(MAKECMDGOALS)))
COMPARE_FILES := $(wordlist 2,3,$(MAKECMDGOALS))
OLD ?= $(word 1,$(COMPARE_FILES))
NEW ?= $(word 2,$(COMPARE_FILES))
$(eval $(COMPARE_FILES):;@:)
endif
bench-compare:
	@if [ -z "$(OLD)" ] || [ -z "$(NEW)" ]; then echo "usage: make bench-compare OLD.json NEW.json (or OLD=… NEW=…)"; exit 2; fi
	@$(GO) run ./bench/modes/cmd/bench-compare $(OLD) $(NEW)

# The OCI image (deploy/image): Debian 12's packages through mmdebstrap and
# umoci, no base image from a registry. A static kproxy (CGO_ENABLED=0,
# symbols stripped) in a second layer; the archive loads with `podman load`
# or `skopeo copy oci-archive:bin/kproxy-image.oci.tar …`. About 25 s with a
# warm Go build cache; needs root and deb.debian.org (MIRROR=… for another).
IMAGE := $(CURDIR)/bin/kproxy-image.oci.tar
image: deps
	@if [ "$$(id -u)" != 0 ]; then echo "make image needs root (mmdebstrap's root mode): run sudo make image"; exit 1; fi
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o bin/image/kproxy ./cmd/kproxy
	./deploy/image/build.sh bin/image/kproxy $(IMAGE)
	@echo "Written $(IMAGE) ($$(du -h $(IMAGE) | cut -f1))"

# The same image for arm64 nodes: kproxy cross-built (GOARCH=arm64), the
# Debian layer of arm64 packages, whose maintainer scripts run under
# qemu-user emulation (deploy/image/README.md).
IMAGE_ARM64 := $(CURDIR)/bin/kproxy-image-arm64.oci.tar
image-arm64: deps
	@if [ "$$(id -u)" != 0 ]; then echo "make image-arm64 needs root (mmdebstrap's root mode, binfmt_misc): run sudo make image-arm64"; exit 1; fi
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o bin/image-arm64/kproxy ./cmd/kproxy
	ARCH=arm64 ./deploy/image/build.sh bin/image-arm64/kproxy $(IMAGE_ARM64)
	@echo "Written $(IMAGE_ARM64) ($$(du -h $(IMAGE_ARM64) | cut -f1))"

STATICCHECK := $(CURDIR)/bin/staticcheck
lint:
	GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd $(ANALYSIS) && $(GO) vet ./... && $(STATICCHECK) ./...

clean:
	rm -rf bin bench/tools/bin
