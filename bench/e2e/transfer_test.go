package e2e

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// transferBytes is the size of the checksummed upload: large enough that a
// relay switching copy strategies mid-stream, or a NAT losing a segment,
// shows up in the digest.
const transferBytes = 1 << 30

func TestHalfCloseAndIntegrity(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		conn, err := l.topo.Client.Dial("tcp", digestVIP+":9002")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		sum, err := sendPattern(conn, transferBytes)
		if err != nil {
			t.Fatalf("sending %d bytes: %v", transferBytes, err)
		}
		// Half-close: the backend sees EOF and still answers on this
		// connection.
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		reply, err := io.ReadAll(conn)
		if err != nil {
			t.Fatalf("reading the digest after half-close: %v", err)
		}
		backend, n, got, err := lab.ParseTCPDigestReply(string(reply))
		if err != nil {
			t.Fatal(err)
		}
		if n != transferBytes || got != sum {
			t.Fatalf("%s received %d bytes with sha256 %s; sent %d bytes with sha256 %s", backend, n, got, int64(transferBytes), sum)
		}
		t.Logf("%d bytes to %s and its digest back in %v", n, backend, time.Since(start))
	})
}

// sendPattern writes size bytes of a fixed pseudo-random pattern and returns
// their sha256 in hex.
func sendPattern(w io.Writer, size int64) (string, error) {
	block := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(block); i += 8 {
		binary.LittleEndian.PutUint64(block[i:], rng.Uint64())
	}
	h := sha256.New()
	out := io.MultiWriter(w, h)
	for sent := int64(0); sent < size; sent += int64(len(block)) {
		if _, err := out.Write(block[:min(int64(len(block)), size-sent)]); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
