package app

import (
	"context"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
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
	// written receives, without blocking, one value per event the sink
	// has sent to the API server (written or refused).
	written chan struct{}
}

// notifyingSink is an events sink that says when it has sent an event: the
// recorder sends from a goroutine of its own, and kproxy, about to exit,
// waits for its last event (kube-proxy, exiting at once, often loses it).
type notifyingSink struct {
	events.EventSink
	written chan<- struct{}
}

func (s notifyingSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.notify()
	return s.EventSink.Create(ctx, e)
}

func (s notifyingSink) Patch(ctx context.Context, old *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	defer s.notify()
	return s.EventSink.Patch(ctx, old, data)
}

func (s notifyingSink) notify() {
	select {
	case s.written <- struct{}{}:
	default:
	}
}

// newNodeEvents starts recording to the API server behind client until ctx
// ends; nil client (a services file) records nothing.
func newNodeEvents(ctx context.Context, logger klog.Logger, client kubernetes.Interface, nodeName string) *nodeEvents {
	if client == nil {
		return nil
	}
	written := make(chan struct{}, 16)
	b := events.NewBroadcaster(notifyingSink{EventSink: &events.EventSinkImpl{Interface: client.EventsV1()}, written: written})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		logger.Info("Warning: not recording events on the Node", "err", err)
		return nil
	}
	context.AfterFunc(ctx, b.Shutdown)
	return &nodeEvents{
		recorder: b.NewRecorder(scheme.Scheme, eventReporter),
		node:     &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName},
		written:  written,
	}
}

// bindFailed records the warning kube-proxy records on its Node when, with
// --bind-address-hard-fail, its healthz or metrics server cannot bind, with
// kube-proxy's reason and message, and waits until it is sent or ctx ends:
// the process exits next.
func (e *nodeEvents) bindFailed(ctx context.Context, be *bindError) {
	if e == nil {
		return
	}
	reason, note := be.kubeProxyEvent()
	e.recorder.Eventf(e.node, nil, v1.EventTypeWarning, reason, "StartKubeProxy", "%s", note)
	select {
	case <-e.written:
	case <-ctx.Done():
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
