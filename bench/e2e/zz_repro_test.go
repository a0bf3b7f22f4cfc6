package e2e

import (
	"testing"
	"time"
)

func TestZZRepro(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.steered }, func(t *testing.T, m proxyMode) {
		for i := 0; i < 150; i++ {
			t.Run("run", func(t *testing.T) {
				l := newLab(t, m, renderCore)
				if l == nil {
					return
				}
				l.runKproxy(t, nil)
				conn, err := l.topo.Client.Dial("tcp", webVIP+":80")
				if err != nil {
					for j := 0; j < 10; j++ {
						c, err2 := l.topo.Client.Dial("tcp", webVIP+":80")
						t.Logf("retry %d at %s: %v", j, time.Now().Format("15:04:05.000"), err2)
						if err2 == nil {
							c.Close()
						}
						time.Sleep(20 * time.Millisecond)
					}
					t.Fatalf("%s: %v", time.Now().Format("15:04:05.000"), err)
				}
				conn.Close()
			})
		}
	})
}
