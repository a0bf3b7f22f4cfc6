package lab

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does, without failing the real test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runRecorded runs fn with a fatalRecorder and returns what it failed with
// ("" if it returned normally).
func runRecorded(t *testing.T, fn func(tb testing.TB)) string {
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rec)
	}()
	<-done
	return rec.msg
}

func TestWithin(t *testing.T) {
	t.Run("returns once cond holds", func(t *testing.T) {
		calls := 0
		msg := runRecorded(t, func(tb testing.TB) {
			Within(tb, time.Minute, "three calls", func() (bool, string) {
				calls++
				return calls == 3, fmt.Sprint(calls)
			})
		})
		if msg != "" || calls != 3 {
			t.Fatalf("Within failed with %q after %d calls, want success on the 3rd", msg, calls)
		}
	})
	t.Run("fails after the bound with the last detail", func(t *testing.T) {
		calls := 0
		msg := runRecorded(t, func(tb testing.TB) {
			Within(tb, 120*time.Millisecond, "the impossible", func() (bool, string) {
				calls++
				return false, fmt.Sprintf("call %d", calls)
			})
		})
		if calls < 2 {
			t.Errorf("cond was asked %d times, want it polled until the bound", calls)
		}
		for _, want := range []string{"the impossible", "120ms", fmt.Sprintf("call %d", calls)} {
			if !strings.Contains(msg, want) {
				t.Errorf("failure %q does not mention %q", msg, want)
			}
		}
	})
}

func TestSpread(t *testing.T) {
	answers := []string{"a", "b", "a", "c"}
	i := 0
	seen := Spread(t, len(answers), func() (string, error) { i++; return answers[i-1], nil })
	if len(seen) != 3 || seen["a"] != 2 || seen["b"] != 1 || seen["c"] != 1 {
		t.Errorf("Spread counted %v, want a×2 b×1 c×1", seen)
	}
	msg := runRecorded(t, func(tb testing.TB) {
		n := 0
		Spread(tb, 5, func() (string, error) {
			if n++; n == 2 {
				return "", errors.New("boom")
			}
			return "x", nil
		})
	})
	if !strings.Contains(msg, "request 2 of 5") || !strings.Contains(msg, "boom") {
		t.Errorf("Spread failed with %q, want it to name request 2 of 5 and the error", msg)
	}
}

func TestGreetingAndEchoProbes(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	var node net.Dialer
	greeting := ServeGreeting(t, "127.0.0.1:0", "hello")
	if got, err := TCPGreeting(&node, greeting.String()); err != nil || got != "hello" {
		t.Errorf("TCPGreeting(%s) = %q, %v; want hello", greeting, got, err)
	}
	echo := ServeUDPEcho(t, "127.0.0.1:0")
	if !echo.Addr().Is4() || echo.Port() == 0 {
		t.Errorf("ServeUDPEcho bound %s, want an IPv4 address and a port", echo)
	}
	big := strings.Repeat("datagram ", 1000)
	if got, err := UDPAsk(&node, echo.String(), big); err != nil || got != big {
		t.Errorf("UDPAsk(%s) of %d bytes = %d bytes, %v; want them echoed", echo, len(big), len(got), err)
	}
	// Nothing listens on the greeting's port over UDP, nor on the echo's
	// over TCP: both probes see the refusal.
	if _, err := UDPAsk(&node, fmt.Sprintf("127.0.0.1:%d", greeting.Port()), "ping"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("UDPAsk to a closed port: %v, want connection refused", err)
	}
	if _, err := TCPGreeting(&node, fmt.Sprintf("127.0.0.1:%d", echo.Port())); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("TCPGreeting to a closed port: %v, want connection refused", err)
	}
}

// TestUDPAskSendsAgain: a UDP ask is a client that retransmits, as a
// resolver does. A server that ignores the first datagrams it gets answers
// a later one of the same ask; one that answers nothing leaves the ask with
// a timeout.
func TestUDPAskSendsAgain(t *testing.T) {
	cases := []struct {
		name    string
		ignore  int
		wantErr bool
	}{
		{name: "answers the first", ignore: 0},
		{name: "ignores the first", ignore: 1},
		{name: "ignores the first two", ignore: 2},
		{name: "never answers", ignore: 1 << 30, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			received := make(chan int, 16)
			go func() {
				buf := make([]byte, 512)
				for i := 0; ; i++ {
					n, from, err := conn.ReadFromUDP(buf)
					if err != nil {
						close(received)
						return
					}
					received <- i + 1
					if i >= tc.ignore {
						_, _ = conn.WriteToUDP(buf[:n], from)
					}
				}
			}()
			got, err := UDPAsk(&net.Dialer{}, conn.LocalAddr().String(), "ping")
			conn.Close()
			sent := 0
			for n := range received {
				sent = n
			}
			if tc.wantErr {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("UDPAsk to a silent server = %q, %v; want a timeout", got, err)
				}
				if sent < 2 {
					t.Errorf("the silent server got %d datagrams, want the ask sent again", sent)
				}
				return
			}
			if err != nil || got != "ping" {
				t.Fatalf("UDPAsk = %q, %v; want ping answered after %d ignored datagrams", got, err, tc.ignore)
			}
			if sent < tc.ignore+1 {
				t.Errorf("the server got %d datagrams, want at least %d", sent, tc.ignore+1)
			}
		})
	}
}

func TestMetricProbes(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	if _, ok := Metric(SyncCountMetric); ok {
		t.Fatal("Metric found a value with nothing serving /metrics")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:10249")
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Join([]string{
		"# HELP " + SyncCountMetric + " Syncs.",
		SyncCountMetric + " 4",
		SyncCountMetric + "_extra 9",
		`kproxy_bytes_total{direction="in"} 10`,
		`kproxy_bytes_total{direction="out"} 0`,
		"kproxy_service_ports 2",
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 7`,
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 8`,
		`kubeproxy_sync_proxy_rules_iptables_total{table="nat",ip_family="IPv4"} 5`,
	}, "\n") + "\n"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, body)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	samples, err := MetricSamples("kproxy_bytes_total", SyncCountMetric)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{SyncCountMetric + " 4", `kproxy_bytes_total{direction="in"} 10`, `kproxy_bytes_total{direction="out"} 0`}
	if strings.Join(samples, "\n") != strings.Join(want, "\n") {
		t.Errorf("MetricSamples = %q, want %q", samples, want)
	}
	if v, ok := Metric("kubeproxy_sync_proxy_rules_last_timestamp_seconds"); !ok || v != "8" {
		t.Errorf("Metric of a per-family metric = %q, %v; want the largest family's, 8", v, ok)
	}
	if v, ok := Metric("kubeproxy_sync_proxy_rules_iptables_total"); ok {
		t.Errorf("Metric of a metric with other labels = %q, want none", v)
	}
	if v, ok := Metric("kproxy_service_ports"); !ok || v != "2" {
		t.Errorf("Metric(kproxy_service_ports) = %q, %v; want 2", v, ok)
	}
	if _, ok := Metric("kproxy_bytes_total"); ok {
		t.Error("Metric found an unlabelled sample of a family that has only labelled ones")
	}
	if n := SyncCount(t); n != 4 {
		t.Errorf("SyncCount = %d, want 4", n)
	}
}

func TestWithoutComments(t *testing.T) {
	save := "# Generated by iptables-nft-save v1.8.9 on Mon Jan  1 00:00:00 2024\n*nat\n:KUBE-PORTALS-HOST - [0:0]\n-A OUTPUT -j KUBE-PORTALS-HOST\nCOMMIT\n# Completed on Mon Jan  1 00:00:00 2024\n"
	want := "*nat\n:KUBE-PORTALS-HOST - [0:0]\n-A OUTPUT -j KUBE-PORTALS-HOST\nCOMMIT\n"
	if got := WithoutComments(save); got != want {
		t.Errorf("WithoutComments =\n%s\nwant\n%s", got, want)
	}
}

// TestUDPAskHeldNeverSharesAPort: with the namespace's ephemeral port range
// cut to eight ports, eight held asks come from eight different ports and a
// ninth finds none left, where asks that freed their ports would have
// shared them; once the test holding them ends, the ports are free again.
func TestUDPAskHeldNeverSharesAPort(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	const low, high = 40000, 40007
	rangeFile := "/proc/sys/net/ipv4/ip_local_port_range"
	if err := os.WriteFile(rangeFile, fmt.Appendf(nil, "%d %d", low, high), 0o644); err != nil {
		t.Fatalf("narrowing the ephemeral port range: %v", err)
	}
	// A server outside the range that answers with the sender's port.
	pc, err := net.ListenPacket("udp4", "127.0.0.1:39999")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(fmt.Appendf(nil, "%d", from.(*net.UDPAddr).Port), from)
		}
	}()
	var node net.Dialer
	server := pc.LocalAddr().String()
	t.Run("held asks", func(t *testing.T) {
		seen := map[string]bool{}
		for i := range high - low + 1 {
			port, err := UDPAskHeld(t, &node, server, "ping")
			if err != nil {
				t.Fatalf("ask %d: %v", i+1, err)
			}
			if seen[port] {
				t.Fatalf("ask %d came from port %s, as an earlier one did (ports so far %v)", i+1, port, seen)
			}
			seen[port] = true
		}
		if port, err := UDPAskHeld(t, &node, server, "ping"); !errors.Is(err, syscall.EAGAIN) {
			t.Errorf("a ninth ask with eight ports held: port %q, error %v; want no port left (EAGAIN)", port, err)
		}
	})
	if port, err := UDPAsk(&node, server, "ping"); err != nil {
		t.Errorf("an ask after the held asks' test ended: port %q, error %v; want their ports given back", port, err)
	}
}
