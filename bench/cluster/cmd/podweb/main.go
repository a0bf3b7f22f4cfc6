// Command podweb is the smoke check's pod: `podweb serve ADDR` answers every
// HTTP request with its hostname (the pod's name), and `podweb get -n N
// URL...` asks each URL N times and prints one line per answer, so a client
// pod's log shows which backends answered; -wait D first waits up to D for
// each URL to answer once (a proxy may not have programmed it yet).
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: podweb serve ADDR | podweb get [-n N] URL...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podweb:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("serve takes one address")
	}
	name, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, name)
	})
	srv := &http.Server{Addr: args[0], ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

// get prints "URL NAME" per answer and "URL error: …" per failure, and
// fails if any request did.
func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	n := fs.Int("n", 1, "requests per URL")
	wait := fs.Duration("wait", 0, "wait up to this long for each URL to answer once first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// A new connection per request, so each is balanced afresh.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	failed := 0
	for _, url := range fs.Args() {
		deadline := time.Now().Add(*wait)
		for {
			_, err := fetch(client, url)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		for range *n {
			name, err := fetch(client, url)
			if err != nil {
				failed++
				fmt.Printf("%s error: %v\n", url, err)
				continue
			}
			fmt.Printf("%s %s\n", url, name)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d requests failed", failed)
	}
	return nil
}

func fetch(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}
