// Package clustersource feeds a servicemap.Sink from a Kubernetes API server
// through client-go shared informers, watching the same objects kube-proxy
// watches: proxied Services, their EndpointSlices, and this node's Node.
package clustersource

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/servicemap"
)

// LabelServiceProxyName marks a Service (and, copied by the EndpointSlice
// controller, its slices) as handled by some other proxy than kube-proxy.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// DefaultResync is kube-proxy's default --config-sync-period.
const DefaultResync = 15 * time.Minute

// Source watches the cluster and forwards what it sees to a Sink.
type Source struct {
	client   kubernetes.Interface
	nodeName string
	resync   time.Duration
	sink     servicemap.Sink
	// WatchServiceCIDRs: hand ServiceCIDR objects to a sink that takes
	// them (kube-proxy's MultiCIDRServiceAllocator gate, GA and on by
	// default). Set it before Run.
	WatchServiceCIDRs bool
	// NodeWait, when positive, holds OnSynced back until this node's Node
	// object has arrived with what NodeReady wants, or NodeWait passed:
	// --nodeport-addresses=primary and --detect-local-mode=NodeCIDR need
	// the Node before the first sync, as kube-proxy waits for it at start
	// (its NodeManager). Set both before Run.
	NodeWait time.Duration
	// NodeReady says whether a Node has what the first sync needs; nil
	// means an InternalIP or ExternalIP.
	NodeReady func(*v1.Node) bool
	started   atomic.Bool
}

// New returns a Source for the node named nodeName. resync is the informers'
// resync period (--config-sync-period); 0 disables periodic resyncs.
func New(client kubernetes.Interface, nodeName string, resync time.Duration, sink servicemap.Sink) *Source {
	return &Source{client: client, nodeName: nodeName, resync: resync, sink: sink, WatchServiceCIDRs: true}
}

// ProxiedSelector selects the Services and EndpointSlices kube-proxy
// programs: those not claimed by another proxy and not of a headless service
// (headless services are served by DNS only).
func ProxiedSelector() (labels.Selector, error) {
	noProxyName, err := labels.NewRequirement(LabelServiceProxyName, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("building %s selector: %w", LabelServiceProxyName, err)
	}
	noHeadless, err := labels.NewRequirement(v1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("building %s selector: %w", v1.IsHeadlessService, err)
	}
	return labels.NewSelector().Add(*noProxyName, *noHeadless), nil
}

// NodeSelector selects the one Node object named nodeName.
func NodeSelector(nodeName string) fields.Selector {
	return fields.OneTermEqualSelector(metav1.ObjectNameField, nodeName)
}

// Run starts the informers, calls the sink's OnSynced once the Service and
// EndpointSlice caches have delivered their initial contents, and blocks
// until ctx is done. The Node cache is not waited for: a missing Node object
// must not hold up service programming. Informers reconnect and relist on
// their own after API-server outages. Run returns an error if the caches
// could not sync before ctx ended; it may be called only once.
func (s *Source) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("cluster source: Run called twice")
	}
	logger := klog.FromContext(ctx).WithValues("node", s.nodeName)

	proxied, err := ProxiedSelector()
	if err != nil {
		return err
	}
	// Services and slices have separate factories, as in kube-proxy, because
	// only Services can be filtered on spec.clusterIP.
	svcFactory := informers.NewSharedInformerFactoryWithOptions(s.client, s.resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = proxied.String()
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone).String()
		}))
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(s.client, s.resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = proxied.String()
		}))
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(s.client, s.resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = NodeSelector(s.nodeName).String()
		}))
	// ServiceCIDRs (cluster-scoped, few) go to sinks that take them; their
	// cache is not waited for either: a missing RBAC grant must not hold up
	// service programming.
	cidrFactory := informers.NewSharedInformerFactoryWithOptions(s.client, s.resync)
	defer func() {
		// Shutdown waits for the informer goroutines, so no handler runs
		// after Run returns.
		svcFactory.Shutdown()
		sliceFactory.Shutdown()
		nodeFactory.Shutdown()
		cidrFactory.Shutdown()
	}()

	nodeReady := s.NodeReady
	if nodeReady == nil {
		nodeReady = HasNodeIP
	}
	h := handlers{sink: s.sink, nodeName: s.nodeName, logger: logger, node: newNodeGate(nodeReady)}
	svcReg, err := svcFactory.Core().V1().Services().Informer().AddEventHandler(eventHandler(h.serviceUpdate, h.serviceDelete))
	if err != nil {
		return fmt.Errorf("registering Service handler: %w", err)
	}
	sliceReg, err := sliceFactory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(eventHandler(h.sliceUpdate, h.sliceDelete))
	if err != nil {
		return fmt.Errorf("registering EndpointSlice handler: %w", err)
	}
	if _, err := nodeFactory.Core().V1().Nodes().Informer().AddEventHandler(eventHandler(h.nodeUpdate, h.nodeDelete)); err != nil {
		return fmt.Errorf("registering Node handler: %w", err)
	}

	if cidrSink, ok := s.sink.(servicemap.ServiceCIDRSink); ok && s.WatchServiceCIDRs {
		ch := cidrHandlers{sink: cidrSink, logger: logger}
		if _, err := cidrFactory.Networking().V1().ServiceCIDRs().Informer().AddEventHandler(eventHandler(ch.update, ch.delete)); err != nil {
			return fmt.Errorf("registering ServiceCIDR handler: %w", err)
		}
	}

	svcFactory.Start(ctx.Done())
	sliceFactory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	cidrFactory.Start(ctx.Done())

	// The registrations' HasSynced (not the informers') turn true only once
	// every object of the initial list has been handed to our handlers, so
	// the sink has the complete initial state when OnSynced is called.
	logger.V(2).Info("Waiting for Service and EndpointSlice caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), svcReg.HasSynced, sliceReg.HasSynced) {
		return fmt.Errorf("service and endpointslice caches did not sync: %w", context.Cause(ctx))
	}
	logger.Info("Service and EndpointSlice caches synced")
	if s.NodeWait > 0 {
		logger.V(2).Info("Waiting for this node's Node object", "timeout", s.NodeWait)
		select {
		case <-h.node.ready:
			logger.V(2).Info("This node's Node object arrived")
		case <-time.After(s.NodeWait):
			// kube-proxy carries on too: "primary" then means every
			// address, NodeCIDR no detector, until the Node arrives.
			logger.Info("Warning: this node's Node object did not arrive in time; syncing without it", "waited", s.NodeWait)
		case <-ctx.Done():
			return nil
		}
	}
	s.sink.OnSynced()

	<-ctx.Done()
	return nil
}

// handlers translates informer callbacks into Sink calls.
type handlers struct {
	sink     servicemap.Sink
	nodeName string
	logger   klog.Logger
	node     *nodeGate
}

// nodeGate closes ready once this node's Node has what the first sync needs.
type nodeGate struct {
	want  func(*v1.Node) bool
	ready chan struct{}
	once  sync.Once
}

func newNodeGate(want func(*v1.Node) bool) *nodeGate {
	return &nodeGate{want: want, ready: make(chan struct{})}
}

func (g *nodeGate) see(node *v1.Node) {
	if g != nil && g.want(node) {
		g.once.Do(func() { close(g.ready) })
	}
}

// HasNodeIP says whether node has an InternalIP or ExternalIP, which is
// what kube-proxy waits for at start.
func HasNodeIP(node *v1.Node) bool {
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP || a.Type == v1.NodeExternalIP {
			return true
		}
	}
	return false
}

func (h handlers) serviceUpdate(obj any) {
	onUpdated(h.logger, obj, "Unexpected object in Service handler", h.sink.OnServiceUpdate)
}

func (h handlers) serviceDelete(obj any) {
	onDeleted[*v1.Service](h.logger, obj, "Unexpected object in Service delete handler", h.sink.OnServiceDelete)
}

func (h handlers) sliceUpdate(obj any) {
	onUpdated(h.logger, obj, "Unexpected object in EndpointSlice handler", h.sink.OnEndpointSliceUpdate)
}

func (h handlers) sliceDelete(obj any) {
	onDeleted[*discovery.EndpointSlice](h.logger, obj, "Unexpected object in EndpointSlice delete handler", h.sink.OnEndpointSliceDelete)
}

func (h handlers) nodeUpdate(obj any) {
	node, ok := updated[*v1.Node](h.logger, obj, "Unexpected object in Node handler")
	if !ok {
		return
	}
	// The field selector already limits the watch to this node; checking
	// again keeps a misbehaving server from feeding us someone else's Node.
	if node.Name != h.nodeName {
		h.logger.V(4).Info("Ignoring other node", "other", node.Name)
		return
	}
	h.sink.OnNodeUpdate(node)
	h.node.see(node)
}

func (h handlers) nodeDelete(obj any) {
	key, ok := deleted[*v1.Node](h.logger, obj, "Unexpected object in Node delete handler")
	if ok && key.Name == h.nodeName {
		h.sink.OnNodeDelete()
	}
}

// cidrHandlers passes ServiceCIDR objects to a sink that takes them.
type cidrHandlers struct {
	sink   servicemap.ServiceCIDRSink
	logger klog.Logger
}

func (h cidrHandlers) update(obj any) {
	if sc, ok := updated[*networkingv1.ServiceCIDR](h.logger, obj, "Unexpected object in ServiceCIDR handler"); ok {
		h.sink.OnServiceCIDRUpdate(sc.Name, sc.Spec.CIDRs)
	}
}

func (h cidrHandlers) delete(obj any) {
	if key, ok := deleted[*networkingv1.ServiceCIDR](h.logger, obj, "Unexpected object in ServiceCIDR delete handler"); ok {
		h.sink.OnServiceCIDRDelete(key.Name)
	}
}

// eventHandler sends an informer's adds and updates to update (the sink
// keeps only the latest object, so the old one is not needed) and its
// deletes to remove.
func eventHandler(update, remove func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
		DeleteFunc: remove,
	}
}

// onUpdated hands the object of an add or update callback to handle when it
// is a T; see updated for anything else.
func onUpdated[T any](logger klog.Logger, obj any, msg string, handle func(T)) {
	if o, ok := updated[T](logger, obj, msg); ok {
		handle(o)
	}
}

// onDeleted hands the key of a deleted T to handle; see deleted for what
// cannot be read.
func onDeleted[T metav1.Object](logger klog.Logger, obj any, msg string, handle func(types.NamespacedName)) {
	if key, ok := deleted[T](logger, obj, msg); ok {
		handle(key)
	}
}

// updated returns the object of an add or update callback as a T. Anything
// else is a client-go or wiring bug: it is logged with msg, never panicked
// on, and the callback is dropped.
func updated[T any](logger klog.Logger, obj any, msg string) (T, bool) {
	o, ok := obj.(T)
	if !ok {
		logger.Error(nil, msg, "type", fmt.Sprintf("%T", obj))
	}
	return o, ok
}

// deleted is deletedKey for a delete callback, logging msg when obj is
// neither a T nor a usable tombstone.
func deleted[T metav1.Object](logger klog.Logger, obj any, msg string) (types.NamespacedName, bool) {
	key, ok := deletedKey[T](obj)
	if !ok {
		logger.Error(nil, msg, "type", fmt.Sprintf("%T", obj))
	}
	return key, ok
}

// deletedKey returns the namespace/name of a deleted object, which the
// informer hands over either as the object itself or, when the delete was
// missed during a watch gap and noticed at relist, as a tombstone.
func deletedKey[T metav1.Object](obj any) (types.NamespacedName, bool) {
	if o, ok := obj.(T); ok {
		return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}, true
	}
	tomb, ok := obj.(cache.DeletedFinalStateUnknown)
	if !ok {
		return types.NamespacedName{}, false
	}
	if o, ok := tomb.Obj.(T); ok {
		return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}, true
	}
	ns, name, err := cache.SplitMetaNamespaceKey(tomb.Key)
	if err != nil || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}
