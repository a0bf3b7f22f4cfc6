package filesource

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// FuzzDecodeFile feeds arbitrary bytes through splitting, strict decoding,
// validation and defaulting. Besides not panicking, every document must be
// either accepted or rejected with an error naming its file, and an accepted
// object must pass validation again unchanged (defaulting is idempotent).
func FuzzDecodeFile(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*")
	seeds = append(seeds, "../../deploy/samples/services.yaml")
	for _, s := range seeds {
		if data, err := os.ReadFile(s); err == nil {
			f.Add(data, filepath.Ext(s) == ".json")
		}
	}
	f.Add([]byte(validService), false)
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"}}]}`), true)

	dec := newDecoder()
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		for _, d := range dec.decodeFile("f", data, isJSON) {
			if (d.obj == nil) == (d.err == nil) {
				t.Fatalf("document %+v is neither cleanly accepted nor rejected", d.pos)
			}
			if d.err != nil {
				if d.err.File != "f" || d.err.Document < 1 {
					t.Fatalf("error %q does not say where it is", d.err)
				}
				continue
			}
			var again errorList
			switch o := d.obj.(type) {
			case *v1.Service:
				c := o.DeepCopy()
				again = defaultAndValidateService(c)
			case *discovery.EndpointSlice:
				again = defaultAndValidateEndpointSlice(o.DeepCopy())
			case *v1.Node:
				again = defaultAndValidateNode(o.DeepCopy())
			default:
				t.Fatalf("accepted a %T", d.obj)
			}
			if len(again) > 0 {
				t.Fatalf("accepted object fails validation when checked again: %v", again)
			}
		}
	})
}
