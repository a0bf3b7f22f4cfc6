package filesource

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// What a rejection may carry into a log line: a hostile file names objects
// and fields of any length (a 1 MiB name made 1 MiB log lines).
const (
	// maxLoggedValue bounds one value quoted from the file: an object's
	// name, a field's value.
	maxLoggedValue = 256
	// maxLoggedMessage bounds the message of one document or file.
	maxLoggedMessage = 4096
)

// clip shortens s to at most n bytes (on a rune boundary) and says how much
// was left out.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...(%d more bytes)", s[:cut], len(s)-cut)
}

// DocumentError says why one document of a services file was rejected. It
// names everything a user needs to find the problem: the file, the
// document's position and first line, the object and the field.
type DocumentError struct {
	File string
	// Document is the 1-based index of the document in the file.
	Document int
	// Item is the 1-based index inside a `kind: List` document, 0 otherwise.
	Item int
	// Line is the file line the document starts on, 0 when unknown.
	Line int
	// Object is "Kind namespace/name" (or "Kind name" for a Node), empty
	// when the document could not be decoded far enough to tell.
	Object string
	Err    error
	// Unparsed says the document could not be parsed: its boundaries are
	// unknown, so the file keeps every object of its last good version
	// that no valid document defines.
	Unparsed bool
}

func (e *DocumentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: document %d", e.File, e.Document)
	if e.Item > 0 {
		fmt.Fprintf(&b, " item %d", e.Item)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " at line %d", e.Line)
	}
	if e.Object != "" {
		fmt.Fprintf(&b, " (%s)", clip(e.Object, maxLoggedValue))
	}
	fmt.Fprintf(&b, ": %s", clip(e.Err.Error(), maxLoggedMessage))
	return b.String()
}

func (e *DocumentError) Unwrap() error { return e.Err }

// FileError says a whole file (or the services path itself) could not be
// read; its objects from the last good read stay in force.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string {
	return clip(e.File, maxLoggedValue) + ": " + clip(e.Err.Error(), maxLoggedMessage)
}
func (e *FileError) Unwrap() error { return e.Err }

// fieldError is one problem with one field of an object.
type fieldError struct {
	path string
	msg  string
}

func (e *fieldError) Error() string {
	if e.path == "" {
		return e.msg
	}
	return e.path + ": " + e.msg
}

// fieldErr formats a problem with the field at path. String arguments (the
// file's values, of any string type) are clipped to maxLoggedValue.
func fieldErr(path *field.Path, format string, args ...any) error {
	p := ""
	if path != nil {
		p = path.String()
	}
	for i, a := range args {
		if v := reflect.ValueOf(a); v.Kind() == reflect.String {
			args[i] = clip(v.String(), maxLoggedValue)
		}
	}
	return &fieldError{path: p, msg: fmt.Sprintf(format, args...)}
}

// apiFieldErrs converts the API machinery's field errors, clipped.
func apiFieldErrs(list field.ErrorList) errorList {
	var errs errorList
	for _, e := range list {
		errs = append(errs, &fieldError{path: e.Field, msg: clip(e.ErrorBody(), maxLoggedValue*2)})
	}
	return errs
}

// errorList joins several problems of one document with "; " so a rejected
// document stays one log line.
type errorList []error

func (l errorList) Error() string {
	parts := make([]string, len(l))
	for i, err := range l {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (l errorList) Unwrap() []error { return l }

// asError returns nil for an empty list, the only error for a list of one,
// and the list otherwise.
func (l errorList) asError() error {
	switch len(l) {
	case 0:
		return nil
	case 1:
		return l[0]
	default:
		return l
	}
}
