package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestServicesCommand(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.String())
		switch r.URL.Query().Get("service") {
		case "starting":
			http.Error(w, "kproxy is starting", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("page " + r.URL.Query().Get("format") + "\n"))
		}
	}))
	defer srv.Close()
	notKproxy := httptest.NewServer(http.NotFoundHandler())
	defer notKproxy.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stdout    string
		stderr    string
		wantAsked string
	}{
		{"text by default", []string{"services", "--address", srv.URL}, 0, "page text\n", "", "/services?format=text"},
		{"json", []string{"services", "--address", strings.TrimPrefix(srv.URL, "http://"), "-o", "json"}, 0, "page json\n", "", "/services?format=json"},
		{"a service", []string{"services", "--address", srv.URL, "demo/web"}, 0, "page text\n", "", "/services?format=text&service=demo%2Fweb"},
		{"bad output", []string{"services", "--address", srv.URL, "-o", "yaml"}, 1, "", "-o yaml: must be text or json", ""},
		{"not started", []string{"services", "--address", srv.URL, "starting"}, 1, "", "answered 503 Service Unavailable: kproxy is starting", ""},
		{"nothing listens", []string{"services", "--address", closed}, 1, "", "nothing listens at " + closed, ""},
		{"no such page", []string{"services", "--address", notKproxy.URL}, 1, "", "has no /services page", ""},
		{"two arguments", []string{"services", "a", "b"}, 1, "", "accepts at most 1 arg", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked = nil
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr, deps{})
			if code != tc.code || stdout.String() != tc.stdout || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q", code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
			if tc.wantAsked != "" && (len(asked) != 1 || asked[0] != tc.wantAsked) {
				t.Errorf("asked %q, want %q", asked, tc.wantAsked)
			}
		})
	}
}
