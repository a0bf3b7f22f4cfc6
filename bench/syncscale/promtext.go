package syncscale

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Metric names both proxies serve (kube-proxy labels most by ip_family;
// kproxy's sync metrics cover both families in one series).
const (
	SyncDuration        = "kubeproxy_sync_proxy_rules_duration_seconds"
	FullSyncDuration    = "kubeproxy_sync_full_proxy_rules_duration_seconds"
	PartialSyncDuration = "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	RestoreFailures     = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
	// NFTablesSyncFailures counts the nftables mode's failed transactions.
	NFTablesSyncFailures = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
)

// Sample is one line of the Prometheus text format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples is a scrape.
type Samples []Sample

// ParseSamples reads the Prometheus text exposition format: comments are
// skipped, every other line must be a sample.
func ParseSamples(r io.Reader) (Samples, error) {
	var out Samples
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n, line, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	return out, nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, errors.New("no value")
	}
	s.Name = line[:i]
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		end, err := parseLabels(rest[1:], s.Labels)
		if err != nil {
			return s, err
		}
		rest = rest[1+end:]
	}
	fields := strings.Fields(rest) // value, then an optional timestamp
	if len(fields) == 0 || len(fields) > 2 {
		return s, errors.New("want a value and an optional timestamp after the name")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("value: %w", err)
	}
	s.Value = v
	return s, nil
}

// parseLabels reads `name="value",…}` into labels and returns the index
// just past the closing brace.
func parseLabels(in string, labels map[string]string) (int, error) {
	i := 0
	for {
		if i < len(in) && in[i] == '}' {
			return i + 1, nil
		}
		eq := strings.IndexByte(in[i:], '=')
		if eq < 0 || i+eq+1 >= len(in) || in[i+eq+1] != '"' {
			return 0, errors.New("malformed labels")
		}
		name := strings.TrimSpace(in[i : i+eq])
		i += eq + 2
		var value strings.Builder
		for ; i < len(in) && in[i] != '"'; i++ {
			if in[i] == '\\' && i+1 < len(in) {
				i++
				switch in[i] {
				case 'n':
					value.WriteByte('\n')
				default:
					value.WriteByte(in[i])
				}
				continue
			}
			value.WriteByte(in[i])
		}
		if i >= len(in) {
			return 0, errors.New("unterminated label value")
		}
		labels[name] = value.String()
		i++ // closing quote
		if i < len(in) && in[i] == ',' {
			i++
		}
	}
}

// IPv4 selects kube-proxy's IPv4 series and kproxy's unlabelled ones: the
// benchmark's services are IPv4, and kube-proxy's IPv6 proxier finishes its
// (empty) first sync long before the IPv4 one.
func IPv4(labels map[string]string) bool {
	f, ok := labels["ip_family"]
	return !ok || f == "IPv4"
}

// AnyFamily selects every series.
func AnyFamily(map[string]string) bool { return true }

// Sum adds the values of the samples named name whose labels match; found
// is false when there are none.
func (ss Samples) Sum(name string, match func(map[string]string) bool) (sum float64, found bool) {
	for _, s := range ss {
		if s.Name == name && match(s.Labels) {
			sum += s.Value
			found = true
		}
	}
	return sum, found
}

// Histogram is a histogram's count and sum.
type Histogram struct {
	Count float64
	Sum   float64
}

// Histogram returns the count and sum of histogram name over the matching
// series (absent: zero).
func (ss Samples) Histogram(name string, match func(map[string]string) bool) Histogram {
	c, _ := ss.Sum(name+"_count", match)
	s, _ := ss.Sum(name+"_sum", match)
	return Histogram{Count: c, Sum: s}
}

// Since is the growth from before to h.
func (h Histogram) Since(before Histogram) Histogram {
	return Histogram{Count: h.Count - before.Count, Sum: h.Sum - before.Sum}
}

// Scrape fetches and parses url (a proxy's /metrics).
func Scrape(ctx context.Context, url string) (Samples, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	ss, err := ParseSamples(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	return ss, nil
}
