package filesource

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	kindService       = "Service"
	kindEndpointSlice = "EndpointSlice"
	kindNode          = "Node"
	kindList          = "List"
)

// objectKey identifies an object across documents, files and reloads.
type objectKey struct {
	Kind      string
	Namespace string
	Name      string
}

func (k objectKey) String() string {
	switch {
	case k.Kind == "":
		return ""
	case k.Name == "":
		return k.Kind
	case k.Kind == kindNode:
		return k.Kind + " " + k.Name
	default:
		return k.Kind + " " + k.Namespace + "/" + k.Name
	}
}

// known says the key identifies one object (a document without a name has
// no identity and is tracked by position instead).
func (k objectKey) known() bool { return k.Kind != "" && k.Name != "" }

// position is where a document sits in the files.
type position struct {
	File string
	Doc  int // 1-based
	Item int // 1-based inside a List, else 0
	Line int // 0 when unknown
}

// document is one decoded document: either obj is set (valid) or err is.
type document struct {
	pos position
	// key is known whenever the document could be decoded far enough to
	// name its object, even if it was rejected.
	key objectKey
	obj runtime.Object
	err *DocumentError
}

// unparsed says the document could not be parsed (err.Unparsed): what it
// holds, and where it ends, are unknown.
func (d document) unparsed() bool { return d.err != nil && d.err.Unparsed }

// decoder turns manifest bytes into validated, defaulted objects. It holds
// no mutable state and is safe for concurrent use.
type decoder struct {
	// json is a strict deserializer: unknown and duplicate fields are errors.
	json runtime.Decoder
}

func newDecoder() *decoder {
	opts := jsonserializer.SerializerOptions{Strict: true}
	return &decoder{json: jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, opts)}
}

// rawDocument is one document's bytes and where it starts.
type rawDocument struct {
	data []byte
	// firstLine is the file line of the document's first byte; line is the
	// first line holding content (what a user would look for).
	firstLine, line int
}

// splitYAML cuts a multi-document YAML file at "---" lines, dropping
// documents that hold only blanks and comments.
func splitYAML(data []byte) []rawDocument {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var docs []rawDocument
	var cur bytes.Buffer
	start, contentLine := 1, 0
	flush := func() {
		if contentLine > 0 {
			docs = append(docs, rawDocument{data: bytes.Clone(cur.Bytes()), firstLine: start, line: contentLine})
		}
		cur.Reset()
		contentLine = 0
	}
	lineNo := 0
	for len(data) > 0 {
		lineNo++
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			line, data = data, nil
		}
		text := strings.TrimRight(string(line), "\r\n")
		if isDocumentSeparator(text) {
			flush()
			start = lineNo + 1
			continue
		}
		if contentLine == 0 {
			trimmed := strings.TrimSpace(text)
			if trimmed != "" && !strings.HasPrefix(trimmed, "#") {
				contentLine = lineNo
			}
		}
		cur.Write(line)
	}
	flush()
	return docs
}

func isDocumentSeparator(line string) bool {
	if !strings.HasPrefix(line, "---") {
		return false
	}
	rest := line[3:]
	return rest == "" || rest[0] == ' ' || rest[0] == '\t'
}

// splitJSON treats a JSON file as one document.
func splitJSON(data []byte) []rawDocument {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	line := 1 + bytes.Count(data[:len(data)-len(bytes.TrimLeft(data, " \t\r\n"))], []byte("\n"))
	return []rawDocument{{data: data, firstLine: 1, line: line}}
}

// decodeFile decodes and validates every document of one file. name is how
// errors refer to the file; isJSON selects JSON rather than YAML parsing.
func (d *decoder) decodeFile(name string, data []byte, isJSON bool) []document {
	var raws []rawDocument
	if isJSON {
		raws = splitJSON(data)
	} else {
		raws = splitYAML(data)
	}
	var docs []document
	for i, raw := range raws {
		pos := position{File: name, Doc: i + 1, Line: raw.line}
		docs = append(docs, d.decodeDocument(pos, raw, !isJSON, true)...)
	}
	return docs
}

// header is what every document must carry, read leniently so that even a
// document the strict decoder rejects can be named in the error.
type header struct {
	apiVersion, kind, namespace, name string
}

func readHeader(jsonData []byte) (header, error) {
	var m map[string]any
	if err := json.Unmarshal(jsonData, &m); err != nil || m == nil {
		return header{}, fmt.Errorf("a document must be a Kubernetes object: a mapping with apiVersion, kind and metadata")
	}
	str := func(m map[string]any, k string) string {
		s, _ := m[k].(string)
		return s
	}
	h := header{apiVersion: str(m, "apiVersion"), kind: str(m, "kind")}
	if meta, ok := m["metadata"].(map[string]any); ok {
		h.namespace, h.name = str(meta, "namespace"), str(meta, "name")
	}
	return h, nil
}

// decodeDocument decodes one document (expanding a List into its items when
// allowList is set).
func (d *decoder) decodeDocument(pos position, raw rawDocument, isYAML, allowList bool) []document {
	fail := func(key objectKey, err error) []document {
		return []document{{pos: pos, key: key, err: &DocumentError{
			File: pos.File, Document: pos.Doc, Item: pos.Item, Line: pos.Line, Object: key.String(), Err: err,
		}}}
	}
	// failUnparsed rejects a document whose boundaries cannot be trusted: a
	// syntax error or a duplicate key may come from a lost separator that
	// merged several documents, or from a save cut short.
	failUnparsed := func(key objectKey, err error) []document {
		docs := fail(key, err)
		docs[0].err.Unparsed = true
		return docs
	}

	jsonData := raw.data
	// A YAML error that only strict parsing finds (a duplicate key) is
	// reported once the object can be named.
	var strictYAMLErr error
	if isYAML {
		converted, err := yaml.YAMLToJSONStrict(raw.data)
		if err != nil {
			lenient, lerr := yaml.YAMLToJSON(raw.data)
			if lerr != nil {
				return failUnparsed(objectKey{}, fmt.Errorf("invalid YAML: %s", yamlMessage(lerr, raw.firstLine)))
			}
			strictYAMLErr, converted = err, lenient
		}
		jsonData = converted
	} else if !json.Valid(raw.data) {
		var v any
		err := json.Unmarshal(raw.data, &v)
		return failUnparsed(objectKey{}, fmt.Errorf("invalid JSON: %v", err))
	}

	h, err := readHeader(jsonData)
	if err != nil {
		return failUnparsed(objectKey{}, err)
	}
	key := objectKey{Kind: h.kind, Namespace: h.namespace, Name: h.name}
	if h.kind == kindNode {
		key.Namespace = "" // cluster-scoped
	} else if key.Namespace == "" {
		key.Namespace = v1.NamespaceDefault
	}

	if err := checkKind(h, allowList); err != nil {
		return fail(key, err)
	}

	if strictYAMLErr != nil {
		return failUnparsed(key, fmt.Errorf("%s", yamlMessage(strictYAMLErr, raw.firstLine)))
	}
	// The YAML was converted above, once: decoding the JSON is much cheaper
	// than handing the YAML to the serializer, which would parse it twice more.
	obj, _, err := d.json.Decode(jsonData, nil, nil)
	if err != nil {
		return fail(key, decodeMessage(err))
	}

	if h.kind == kindList {
		list, ok := obj.(*v1.List)
		if !ok {
			return fail(key, fmt.Errorf("decoded a %T for kind List", obj))
		}
		var docs []document
		for i, item := range list.Items {
			itemPos := position{File: pos.File, Doc: pos.Doc, Item: i + 1}
			docs = append(docs, d.decodeDocument(itemPos, rawDocument{data: item.Raw}, false, false)...)
		}
		return docs
	}

	var errs errorList
	switch o := obj.(type) {
	case *v1.Service:
		errs = defaultAndValidateService(o)
	case *discovery.EndpointSlice:
		errs = defaultAndValidateEndpointSlice(o)
	case *v1.Node:
		errs = defaultAndValidateNode(o)
	default:
		return fail(key, fmt.Errorf("decoded an unexpected %T for kind %s", obj, h.kind))
	}
	if len(errs) > 0 {
		return fail(key, errs.asError())
	}
	return []document{{pos: pos, key: key, obj: obj}}
}

// supportedKinds maps each accepted kind to the one apiVersion accepted for it.
func supportedAPIVersion(kind string) (string, bool) {
	switch kind {
	case kindService, kindNode, kindList:
		return "v1", true
	case kindEndpointSlice:
		return discovery.SchemeGroupVersion.String(), true
	}
	return "", false
}

func checkKind(h header, allowList bool) error {
	switch {
	case h.apiVersion == "" && h.kind == "":
		return fmt.Errorf("apiVersion and kind are required")
	case h.apiVersion == "":
		return fmt.Errorf("apiVersion is required")
	case h.kind == "":
		return fmt.Errorf("kind is required")
	}
	want, ok := supportedAPIVersion(h.kind)
	switch {
	case h.kind == "Endpoints":
		return fmt.Errorf("kind Endpoints is not supported; a services file holds Service, EndpointSlice and Node objects (describe endpoints with discovery.k8s.io/v1 EndpointSlices)")
	case !ok || (h.kind == kindList && !allowList):
		return fmt.Errorf("kind %s is not supported; a services file holds Service, EndpointSlice and Node objects", h.kind)
	case h.apiVersion != want:
		return fmt.Errorf("apiVersion %s is not supported for %s; use %s", h.apiVersion, h.kind, want)
	}
	return nil
}

// decodeMessage turns a decoder error into the message the user sees,
// without the serializer's internal prefixes.
func decodeMessage(err error) error {
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		return errorList(strict.Errors()).asError()
	}
	return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "json: "))
}

var yamlLine = regexp.MustCompile(`\bline (\d+)`)

// yamlMessage cleans up a YAML library error: line numbers are made
// relative to the file rather than the document, and the conversion prefix
// and line breaks are dropped.
func yamlMessage(err error, firstLine int) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:")
	msg = strings.TrimPrefix(msg, "json: ")
	msg = strings.Join(strings.Fields(msg), " ")
	if firstLine > 1 {
		msg = yamlLine.ReplaceAllStringFunc(msg, func(s string) string {
			n, err := strconv.Atoi(strings.TrimPrefix(s, "line "))
			if err != nil {
				return s
			}
			return "line " + strconv.Itoa(n+firstLine-1)
		})
	}
	return msg
}
