package filesource

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"kproxy.dev/kproxy/sync/servicemap/sinktest"
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

// FuzzReconcileVersions applies successive versions of one services file
// (a, b, a again, then an empty read) through decoding, reconcile and the
// sink, and checks last-good semantics after each:
//   - a version with no error applies exactly: the state is its objects;
//   - nothing is invented: every object in force comes from a valid
//     document of this version or is the last good version of one in force;
//   - no object vanishes because of a version that is empty or holds a
//     document that cannot be parsed, nor because its own document was
//     rejected;
//   - no two services hold one cluster IP or node port;
//   - the sink holds exactly the state.
func FuzzReconcileVersions(f *testing.F) {
	sample, _ := os.ReadFile("../../deploy/samples/services.yaml")
	half := sample[:len(sample)/2]
	dup := validService + "---\n" + strings.Replace(validService, "name: web", "name: web2", 1)
	noSeparators := strings.ReplaceAll(string(sample), "\n---\n", "\n")
	for _, seed := range [][2][]byte{
		{sample, half},
		{sample, nil},
		{sample, []byte("\n \n")},
		{sample, []byte(noSeparators)},
		{sample, []byte("# nothing\n")},
		{[]byte(validService), []byte(dup)},
		{[]byte(dup), []byte("apiVersion: v1\nkind: Service\nmetadata: {name: web\n---\n" + validService)},
		{sample, append([]byte("{\n---\n"), sample...)},
	} {
		f.Add(seed[0], seed[1], false)
	}
	if data, err := os.ReadFile("testdata/list.json"); err == nil {
		f.Add(data, data[:len(data)/2], true)
	}

	dec := newDecoder()
	f.Fuzz(func(t *testing.T, a, b []byte, isJSON bool) {
		name := "f.yaml"
		if isJSON {
			name = "f.json"
		}
		sink := sinktest.New()
		current := state{}
		for step, data := range [][]byte{a, b, a, nil} {
			read := dec.decodeContent(name, data)
			res := reconcile(current, []fileRead{read})
			applyDiff(sink, "n", current, res.next)
			checkLastGood(t, step, current, read, res)
			checkSink(t, step, sink, res.next)
			current = res.next
		}
	})
}

func checkLastGood(t *testing.T, step int, prev state, read fileRead, res reconcileResult) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d: "+format, append([]any{step}, args...)...)
	}
	valid := map[objectKey]runtime.Object{}
	for _, d := range read.docs {
		if d.err == nil {
			valid[d.key] = d.obj
		}
	}
	for key, e := range res.next {
		if obj, ok := valid[key]; ok {
			if !apiequality.Semantic.DeepEqual(obj, e.obj) {
				fail("%s in force is not what its valid document says", key)
			}
			continue
		}
		if p, ok := prev[key]; !ok || !apiequality.Semantic.DeepEqual(p.obj, e.obj) {
			fail("%s is in force but neither valid now nor in force before", key)
		}
	}
	if len(res.errs) == 0 && len(res.next) != len(valid) {
		fail("a version without errors applies %d objects, want exactly its %d", len(res.next), len(valid))
	}
	held := read.held()
	for _, d := range read.docs {
		if d.err != nil && d.key.known() {
			if _, was := prev[d.key]; was {
				if _, is := res.next[d.key]; !is {
					fail("%s vanished because its document was rejected: %v", d.key, d.err)
				}
			}
		}
	}
	if held {
		for key := range prev {
			if _, is := res.next[key]; !is {
				fail("%s vanished although the version was held as a whole (%v)", key, res.errs)
			}
		}
	}
	if held != (res.heldFiles == 1) {
		fail("held %v but counted %d held files", held, res.heldFiles)
	}
	if losers := claimConflicts(state{}, res.next); len(losers) > 0 {
		fail("conflicting claims in force: %v", losers)
	}
}

// checkSink fails t unless sink holds exactly the objects of s (of the
// Nodes, only "n").
func checkSink(t *testing.T, step int, sink *sinktest.Recorder, s state) {
	t.Helper()
	got := sink.State()
	want := map[objectKey]bool{}
	for key := range s {
		if key.Kind != kindNode || key.Name == "n" {
			want[key] = true
		}
	}
	have := map[objectKey]bool{}
	for nn := range got.Services {
		have[objectKey{Kind: kindService, Namespace: nn.Namespace, Name: nn.Name}] = true
	}
	for nn := range got.Slices {
		have[objectKey{Kind: kindEndpointSlice, Namespace: nn.Namespace, Name: nn.Name}] = true
	}
	if got.Node != nil {
		have[objectKey{Kind: kindNode, Name: got.Node.Name}] = true
	}
	if !maps.Equal(want, have) {
		t.Fatalf("step %d: the sink holds %v, the state %v", step, have, want)
	}
}
