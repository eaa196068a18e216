package clustertest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Ingest writes batches of unique rows of table cpu (tag host, field v,
// one timestamp per row) over HTTP line protocol until stopped, each
// writer to the datanode its target names, and records which rows were
// acknowledged: a 204 acknowledges every row of its batch.
type Ingest struct {
	mu        sync.Mutex
	acked     map[string]bool
	requests  int
	failed    int         // requests not acknowledged
	successes []time.Time // when each acknowledged request returned
	seq       int64
	done      chan struct{}
	wg        sync.WaitGroup
}

// IngestOptions shape an Ingest.
type IngestOptions struct {
	Writers, Batch, Hosts int
	// Target returns writer w's datanode HTTP address (host:port), asked
	// before each request with the writer's failed requests so far (a
	// client with several endpoints moves on after a failure).
	Target func(w, failures int) string
	// Token, if set, is sent as "Authorization: Token <it>".
	Token string
}

// StartIngest starts the writers.
func StartIngest(o IngestOptions) *Ingest {
	g := &Ingest{acked: map[string]bool{}, done: make(chan struct{})}
	httpc := &http.Client{Timeout: 60 * time.Second}
	for w := range o.Writers {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			failures := 0
			for {
				select {
				case <-g.done:
					return
				default:
				}
				var b strings.Builder
				var keys []string
				g.mu.Lock()
				for range o.Batch {
					g.seq++
					host := fmt.Sprintf("h%d", g.seq%int64(o.Hosts))
					fmt.Fprintf(&b, "cpu,host=%s v=%d %d\n", host, g.seq, g.seq*1e9)
					keys = append(keys, fmt.Sprintf("%s/%d", host, g.seq*1e9))
				}
				g.mu.Unlock()
				req, _ := http.NewRequest("POST", "http://"+o.Target(w, failures)+"/write?db=x", strings.NewReader(b.String()))
				if o.Token != "" {
					req.Header.Set("Authorization", "Token "+o.Token)
				}
				resp, err := httpc.Do(req)
				ok := err == nil && resp.StatusCode == http.StatusNoContent
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				g.mu.Lock()
				g.requests++
				if ok {
					for _, k := range keys {
						g.acked[k] = true
					}
					g.successes = append(g.successes, time.Now())
				} else {
					g.failed++
					failures++
				}
				g.mu.Unlock()
				if !ok {
					select { // back off instead of spinning
					case <-g.done:
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		}()
	}
	return g
}

// Acks is how many rows have been acknowledged.
func (g *Ingest) Acks() int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.acked) }

// Requests returns how many requests returned and how many failed.
func (g *Ingest) Requests() (total, failed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.requests, g.failed
}

// LongestGap is the longest time between from and to with no
// acknowledged request.
func (g *Ingest) LongestGap(from, to time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	longest, last := time.Duration(0), from
	for _, s := range g.successes {
		if s.Before(from) || s.After(to) {
			continue
		}
		longest = max(longest, s.Sub(last))
		last = s
	}
	return max(longest, to.Sub(last))
}

// WaitMore waits until n more rows are acknowledged, for at most deadline.
func (g *Ingest) WaitMore(t testing.TB, n int, deadline time.Duration) {
	t.Helper()
	want := g.Acks() + n
	end := time.Now().Add(deadline)
	for g.Acks() < want {
		if time.Now().After(end) {
			t.Fatalf("ingest stalled at %d acknowledged rows (waiting for %d)", g.Acks(), want)
		}
		time.Sleep(50 * time.Millisecond) // progress of other goroutines over HTTP
	}
}

// Stop ends the writers and returns what was acknowledged and how many
// requests failed.
func (g *Ingest) Stop() (map[string]bool, int) {
	close(g.done)
	g.wg.Wait()
	return g.acked, g.failed
}
