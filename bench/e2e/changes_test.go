package e2e

import (
	"fmt"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// stickyTimeout is the affinity timeout of the change cases, short so that
// its expiry can be watched.
const stickyTimeout = 2

// affinityTries bounds the requests that look for another backend once the
// pin expired: a random mode may pick the pinned backend again (1 in 3 per
// try), and each try waits out the timeout first.
const affinityTries = 8

func TestAffinityAndEndpointChanges(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		core := func(backends []string) coreServices {
			timeout := stickyTimeout
			if m.virtualServers {
				timeout = ipvsStickyTimeout
			}
			return coreServices{backends: backends, stickyTimeout: timeout}
		}
		l := startLab(t, m, func(backends []string) string { return core(backends).render() })
		if l == nil {
			return
		}
		client := l.topo.Client
		askSticky, askWeb := askHTTP(client, "http://"+stickyVIP+"/"), askHTTP(client, "http://"+webVIP+"/")
		if m.virtualServers {
			// IPVS keeps affinity while the client's earlier connections
			// are known: end them with resets, which it forgets soonest.
			askSticky = func() (string, error) { return askResetting(client, stickyVIP+":80") }
		}

		t.Run("affinity pins a client", func(t *testing.T) {
			seen := lab.Spread(t, 6, askSticky)
			l.wantBackends(t, "ClientIP affinity", seen, 1)
		})
		t.Run("affinity expires after its timeout", func(t *testing.T) {
			if m.virtualServers {
				wantPersistenceExpiry(t, l.topo.Client, stickyVIP+":80", ipvsStickyTimeout*time.Second)
				return
			}
			first, err := askSticky()
			if err != nil {
				t.Fatal(err)
			}
			var answers []string
			for range affinityTries {
				time.Sleep(stickyTimeout*time.Second + 200*time.Millisecond) // unused for longer than the timeout
				got, err := askSticky()
				if err != nil {
					t.Fatal(err)
				}
				if got != first {
					return
				}
				answers = append(answers, got)
			}
			t.Fatalf("pinned to %s; after %d waits longer than the %d s timeout the answers were still %v",
				first, affinityTries, stickyTimeout, answers)
		})
		t.Run("a removed endpoint stops getting traffic", func(t *testing.T) {
			c := core(l.backends)
			c.webBackends = l.backendsExcept("backend-3")
			l.write(t, c.render())
			lab.Within(t, changeBound, "backend-3 leaving the rotation", func() (bool, string) {
				seen, err := spreadOver(2, askWeb)
				return err == nil && len(seen) == 2 && seen["backend-3"] == 0, fmt.Sprint(seen, err)
			})
		})
		t.Run("an added endpoint gets traffic", func(t *testing.T) {
			l.write(t, core(l.backends).render())
			lab.Within(t, changeBound, "backend-3 rejoining the rotation", func() (bool, string) {
				seen, err := spreadOver(3, askWeb)
				return err == nil && len(seen) == 3, fmt.Sprint(seen, err)
			})
		})
		t.Run("a deleted service stops answering", func(t *testing.T) {
			c := core(l.backends)
			c.withoutGone = true
			l.write(t, c.render())
			lab.Within(t, changeBound, "the deleted service's rules going away", func() (bool, string) {
				programmed, state := l.programs(t, goneVIP)
				return !programmed, state
			})
			wantNotServed(t, client, "the deleted service", goneVIP+":80")
			l.wantBalanced(t, "web after another service's deletion", askWeb)
		})
	})
}
