package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// defaultMetricsURL is where kproxy serves /services unless
// --metrics-bind-address moved it.
const defaultMetricsURL = "http://127.0.0.1:10249"

// newServicesCommand is `kproxy services`: the /services page of a running
// kproxy, as a table or as JSON.
func newServicesCommand() *cobra.Command {
	var (
		address string
		output  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "services [namespace[/name]]",
		Short: "Show what a running kproxy believes and programmed for each service port",
		Long: `services asks a running kproxy (its /services page, on the metrics address)
for each service port's addresses, traffic policies, affinity and endpoints
with their state, and what the proxy mode programmed for it: iptables or
nftables chains, IPVS virtual servers, or the userspace mode's relays and
their counters. An argument narrows it to a namespace or one Service.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %s: must be text or json", output)
			}
			filter := ""
			if len(args) == 1 {
				filter = args[0]
			}
			body, err := fetchServices(cmd.Context(), address, output, filter, timeout)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(body)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&address, "address", defaultMetricsURL, "kproxy's metrics address (its --metrics-bind-address), as a URL or host:port.")
	fs.StringVarP(&output, "output", "o", "text", "Output format: text (a table) or json (the page as kproxy serves it).")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "How long to wait for the answer.")
	return cmd
}

// fetchServices GETs /services from the kproxy at address.
func fetchServices(ctx context.Context, address, format, filter string, timeout time.Duration) ([]byte, error) {
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	base, err := url.Parse(address)
	if err != nil {
		return nil, fmt.Errorf("--address %s: %w", address, err)
	}
	q := url.Values{"format": {format}}
	if filter != "" {
		q.Set("service", filter)
	}
	u := base.JoinPath("/services")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("asking %s: %w", u, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("nothing listens at %s: is kproxy running, with its metrics on that address (--metrics-bind-address; --address points elsewhere)? %w", base.Host, err)
		}
		return nil, fmt.Errorf("asking kproxy at %s: %w", base.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading kproxy's answer from %s: %w", u, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s has no /services page: is it kproxy (kube-proxy has none), and recent enough?", base.Host)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("kproxy at %s answered %s: %s", base.Host, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
