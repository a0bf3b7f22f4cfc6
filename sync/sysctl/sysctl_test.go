package sysctl_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"kproxy.dev/kproxy/sync/sysctl"
	"kproxy.dev/kproxy/sync/sysctl/fakesysctl"
)

// A Proc with another root (module parameters, a test directory) reads and
// writes the files there, never creates one, and names the full path.
func TestProcRoot(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "nf_conntrack", "parameters")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hashsize"), []byte("16384\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := sysctl.Proc{Root: root}
	tests := []struct {
		name    string
		write   bool
		param   string
		value   string
		wantErr string
	}{
		{name: "read", param: "nf_conntrack/parameters/hashsize", value: "16384"},
		{name: "write", write: true, param: "nf_conntrack/parameters/hashsize", value: "32768"},
		{name: "read back", param: "nf_conntrack/parameters/hashsize", value: "32768"},
		{name: "missing", param: "nf_conntrack/parameters/missing",
			wantErr: "reading " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{name: "a write never creates", write: true, param: "nf_conntrack/parameters/missing", value: "1",
			wantErr: "writing " + filepath.Join(dir, "missing") + "=1: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			var err error
			if tt.write {
				err = p.Write(tt.param, tt.value)
			} else {
				got, err = p.Read(tt.param)
			}
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.write && got != tt.value {
				t.Errorf("Read = %q, want %q", got, tt.value)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a write created a file: %v", err)
	}
}

func TestInts(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    int
		wantErr string
	}{
		{name: "integer", value: "65536\n", want: 65536},
		{name: "negative", value: "-1", want: -1},
		{name: "not an integer", value: "32768\t60999", wantErr: `sysctl a/b holds "32768\t60999", not an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakesysctl.New(map[string]string{"a/b": tt.value})
			got, err := sysctl.ReadInt(s, "a/b")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ReadInt error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ReadInt = %d, %v; want %d", got, err, tt.want)
			}
			if err := sysctl.WriteInt(s, "a/b", got+1); err != nil {
				t.Fatal(err)
			}
			if v := s.Values()["a/b"]; v != strconv.Itoa(tt.want+1) {
				t.Errorf("after WriteInt the value is %q", v)
			}
		})
	}
}

// The fake's failures come and go as a test sets them, and only successful
// writes are recorded.
func TestFakeFailures(t *testing.T) {
	s := fakesysctl.New(map[string]string{"a/b": "0"})
	tests := []struct {
		name       string
		failReads  syscall.Errno
		failWrites syscall.Errno
		wantRead   error
		wantWrite  error
	}{
		{name: "none"},
		{name: "read-only", failWrites: syscall.EROFS, wantWrite: syscall.EROFS},
		{name: "write-only", failReads: syscall.EACCES, wantRead: syscall.EACCES},
		{name: "cleared"},
	}
	wantWrites := []string{}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.FailReads("a/b", tt.failReads)
			s.FailWrites("a/b", tt.failWrites)
			if _, err := s.Read("a/b"); !errors.Is(err, tt.wantRead) || (err == nil) != (tt.wantRead == nil) {
				t.Errorf("Read error %v, want %v", err, tt.wantRead)
			}
			value := strconv.Itoa(i)
			if err := s.Write("a/b", value); !errors.Is(err, tt.wantWrite) || (err == nil) != (tt.wantWrite == nil) {
				t.Errorf("Write error %v, want %v", err, tt.wantWrite)
			}
			if tt.wantWrite == nil {
				wantWrites = append(wantWrites, "a/b="+value)
			}
			if got := s.Writes(); !slices.Equal(got, wantWrites) {
				t.Errorf("Writes = %q, want %q", got, wantWrites)
			}
			if got := s.WritesOf("a/b"); got != len(wantWrites) {
				t.Errorf("WritesOf = %d, want %d", got, len(wantWrites))
			}
		})
	}
}
