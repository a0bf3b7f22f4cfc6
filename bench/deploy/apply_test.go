package deploy

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// applier applies manifests with server-side apply, as `kubectl apply
// --server-side` does, with strict field validation (unknown and duplicate
// fields are errors, as kubectl makes them).
type applier struct {
	client dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(cfg *rest.Config) (*applier, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	groups, err := restmapper.GetAPIGroupResources(disco)
	if err != nil {
		return nil, fmt.Errorf("discovering API resources: %w", err)
	}
	return &applier{client: client, mapper: restmapper.NewDiscoveryRESTMapper(groups)}, nil
}

// apply applies each object in turn, stopping at the first error; with
// dryRun nothing is stored, but every object goes through the API server's
// decoding, defaulting, validation and admission as if it were.
func (a *applier) apply(ctx context.Context, objs []*unstructured.Unstructured, dryRun bool) error {
	force := true
	opts := metav1.PatchOptions{FieldManager: "kproxy-bench-deploy", Force: &force,
		FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, obj := range objs {
		id := obj.GetKind() + " " + obj.GetName()
		mapping, err := a.mapper.RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		var res dynamic.ResourceInterface = a.client.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			res = a.client.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		body, err := json.Marshal(obj.Object)
		if err != nil {
			return fmt.Errorf("%s: encoding: %w", id, err)
		}
		if _, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts); err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
	}
	return nil
}

// get returns the stored object of obj's kind, namespace and name.
func (a *applier) get(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	mapping, err := a.mapper.RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.client.Resource(mapping.Resource).Namespace(obj.GetNamespace()).Get(ctx, obj.GetName(), metav1.GetOptions{})
	}
	return a.client.Resource(mapping.Resource).Get(ctx, obj.GetName(), metav1.GetOptions{})
}
