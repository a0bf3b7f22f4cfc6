package cluster

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"
)

func TestImageBase(t *testing.T) {
	tests := []struct{ ref, want string }{
		{"localhost/kproxy:latest", "localhost/kproxy"},
		{"registry.k8s.io/e2e-test-images/agnhost:2.63.0", "registry.k8s.io/e2e-test-images/agnhost"},
		{"localhost:5000/pause:3.10", "localhost:5000/pause"},
		{"localhost:5000/pause", "localhost:5000/pause"},
	}
	for _, tt := range tests {
		if got := imageBase(tt.ref); got != tt.want {
			t.Errorf("imageBase(%q) = %q, want %q", tt.ref, got, tt.want)
		}
	}
}

func TestArchiveRef(t *testing.T) {
	tests := []struct {
		name    string
		index   string // "" for an archive without index.json
		want    string
		wantErr bool
	}{
		{name: "full name", index: `{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"registry.k8s.io/e2e-test-images/busybox:1.37.0-1"}}]}`,
			want: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"},
		{name: "a bare tag is no name", index: `{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"build"}}]}`, wantErr: true},
		{name: "no index", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "image.oci.tar")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			tw := tar.NewWriter(f)
			files := map[string]string{"./oci-layout": `{"imageLayoutVersion":"1.0.0"}`}
			if tt.index != "" {
				files["./index.json"] = tt.index
			}
			for name, data := range files {
				if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
					t.Fatal(err)
				}
				if _, err := tw.Write([]byte(data)); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			got, err := archiveRef(path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("archiveRef: %q, %v; want error %v", got, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("archiveRef = %q, want %q", got, tt.want)
			}
		})
	}
}
