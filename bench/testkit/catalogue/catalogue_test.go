package catalogue

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestScenariosAreWellFormed guards the catalogue itself: unique names, a
// doc line, every slice owned by a Service of the scenario, and a
// snapshot that holds a port for every programmable Service.
func TestScenariosAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range All() {
		t.Run(sc.Name, func(t *testing.T) {
			if sc.Name == "" || seen[sc.Name] {
				t.Fatalf("empty or repeated name %q", sc.Name)
			}
			seen[sc.Name] = true
			if sc.Doc == "" {
				t.Error("no Doc")
			}
			services := map[types.NamespacedName]bool{}
			for _, s := range sc.Services {
				services[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = true
			}
			for _, sl := range sc.Slices {
				owner := types.NamespacedName{Namespace: sl.Namespace, Name: sl.Labels["kubernetes.io/service-name"]}
				if !services[owner] {
					t.Errorf("slice %s/%s belongs to no Service of the scenario", sl.Namespace, sl.Name)
				}
			}
			snap := sc.Snapshot()
			programmed := map[types.NamespacedName]bool{}
			for name := range snap.All() {
				programmed[name.NamespacedName] = true
			}
			want := 0
			for _, s := range sc.Services {
				if s.Spec.ClusterIP != "None" && s.Spec.ExternalName == "" {
					want++
				}
			}
			if len(programmed) != want {
				t.Errorf("the snapshot programs %d services, want %d", len(programmed), want)
			}
			if snap.Node == nil || snap.Node.Name != "node-a" {
				t.Errorf("snapshot node = %+v, want node-a", snap.Node)
			}
		})
	}
}
