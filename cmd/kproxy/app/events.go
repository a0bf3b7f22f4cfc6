package app

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/mode"
)

// eventReporter is the reporting controller of kproxy's events: kube-proxy's,
// so that what watches for kube-proxy's events on Nodes (its "Starting"
// birth cry) sees kproxy's the same way.
const eventReporter = "kube-proxy"

// nodeEvents records events on this node's Node object through the
// events.k8s.io/v1 API, as kube-proxy v1.36 does (events.NewBroadcaster,
// a recorder named kube-proxy, the Node as the regarding object).
type nodeEvents struct {
	recorder events.EventRecorder
	node     *v1.ObjectReference
}

// newNodeEvents starts recording to the API server behind client until ctx
// ends; nil client (a services file) records nothing.
func newNodeEvents(ctx context.Context, logger klog.Logger, client kubernetes.Interface, nodeName string) *nodeEvents {
	if client == nil {
		return nil
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		logger.Info("Warning: not recording events on the Node", "err", err)
		return nil
	}
	context.AfterFunc(ctx, b.Shutdown)
	return &nodeEvents{
		recorder: b.NewRecorder(scheme.Scheme, eventReporter),
		node:     &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName},
	}
}

// started is kube-proxy's birth cry, sent once the sources run.
func (e *nodeEvents) started() {
	if e != nil {
		e.recorder.Eventf(e.node, nil, v1.EventTypeNormal, "Starting", "StartKubeProxy", "")
	}
}

// modeChosen sends the warning kube-proxy sends when it starts its IPVS mode.
func (e *nodeEvents) modeChosen(logger klog.Logger, name mode.Name) {
	if e == nil || name != mode.IPVS {
		return
	}
	const message = "The ipvs proxier is now deprecated and may be removed in a future release. Please use 'nftables' instead."
	logger.Info("Warning: " + message)
	e.recorder.Eventf(e.node, nil, v1.EventTypeWarning, "IPVSDeprecation", "StartKubeProxy", message)
}

// serviceHealthCheckFailed is the warning kube-proxy records on a Service
// whose health-check node port it cannot open.
func (e *nodeEvents) serviceHealthCheckFailed(svc types.NamespacedName, port uint16, err error) {
	if e == nil {
		return
	}
	ref := &v1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}
	e.recorder.Eventf(ref, nil, v1.EventTypeWarning, "FailedToStartServiceHealthcheck", "Listen",
		"node %s failed to start healthcheck %q on port %d: %v", e.node.Name, svc.String(), port, err)
}
