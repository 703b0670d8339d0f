package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
)

// BenchmarkIngestBackends ingests one corpus through the real pipeline
// (upload → outbox → relay → MQ → parse, chunk, embed, commit, and on
// OpenSearch the search-index consumer) on the Postgres and the OpenSearch
// backend, alternating, in one run, each round on a fresh database (and
// index), so both see the same machine. The corpus is a BEIR folder's
// paragraphs and questions, each a document (CMRC 2018 trial: 1,258 short
// Chinese documents). It reports each backend's chunks/s from the first
// upload to the last document ready, and their ratio (target ≥ 0.8).
//
//	RAGENT_BENCH_DATASET=$PWD/../shared/eval/cmrc-trial go test ./cmd/ragent -run '^$' -bench IngestBackends -benchtime 2x
func BenchmarkIngestBackends(b *testing.B) {
	dir := os.Getenv("RAGENT_BENCH_DATASET")
	if dir == "" {
		b.Skip("RAGENT_BENCH_DATASET names the BEIR folder to ingest")
	}
	ds, err := eval.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	var texts []string
	for _, d := range ds.Corpus {
		texts = append(texts, strings.TrimSpace(d.Title+"\n\n"+d.Text))
	}
	for _, q := range ds.Queries {
		texts = append(texts, q.Text)
	}
	backends := strings.Fields(cmp.Or(os.Getenv("RAGENT_BENCH_BACKENDS"), "postgres opensearch"))
	count := os.Getenv("RAGENT_BENCH_COUNT_REQUESTS") != ""
	chunks := map[string]int{}
	elapsed := map[string]time.Duration{}
	for round := range b.N {
		for _, backend := range backends {
			cfg := testConfig(b)
			var counter *requestCounter
			if backend == "opensearch" {
				cfg = openSearchConfig(b, "")
				if count {
					counter = countRequests(b, &cfg)
				}
			}
			self, engine := cpuSeconds(b, "self"), cpuSeconds(b, "opensearch")
			pg := watchDatabaseCPU(b, cfg.DatabaseURL)
			n, d := ingestOnce(b, cfg, texts)
			chunks[backend] += n
			elapsed[backend] += d
			b.Logf("round %d %s: %d chunks in %.2f s, %.1f chunks/s; CPU: ragent %.1f s, OpenSearch node %.1f s, Postgres %.1f s; load average %s",
				round+1, backend, n, d.Seconds(), float64(n)/d.Seconds(),
				cpuSeconds(b, "self")-self, cpuSeconds(b, "opensearch")-engine, pg(), loadAverage())
			if counter != nil {
				b.Logf("round %d %s: OpenSearch requests per document: %s", round+1, backend, counter.report(n))
			}
		}
	}
	rate := func(backend string) float64 { return float64(chunks[backend]) / elapsed[backend].Seconds() }
	for _, backend := range backends {
		b.ReportMetric(rate(backend), backend+"_chunks/s")
	}
	if len(backends) == 2 {
		b.ReportMetric(rate("opensearch")/rate("postgres"), "opensearch/postgres")
	}
}

// requestCounter counts the requests an instance sends to OpenSearch, by
// method and first path segment, with the time they took
// (RAGENT_BENCH_COUNT_REQUESTS=1: the proxy costs CPU of its own, so the
// rates of such a run are not the benchmark's).
type requestCounter struct {
	mu    sync.Mutex
	n     map[string]int
	total map[string]time.Duration
	items map[string]int // bulk actions
}

// countRequests points cfg's OpenSearch URL at a counting reverse proxy.
func countRequests(b *testing.B, cfg *Config) *requestCounter {
	target, err := url.Parse(cfg.OpenSearchURL)
	if err != nil {
		b.Fatal(err)
	}
	rc := &requestCounter{n: map[string]int{}, total: map[string]time.Duration{}, items: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seg := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)
		key := r.Method + " /" + seg[0]
		if strings.HasPrefix(seg[0], cfg.OpenSearchIndex) {
			key = r.Method + " /<index>"
			if len(seg) > 1 {
				key += "/" + seg[1]
			}
		}
		if r.URL.Path == "/_bulk" && r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			rc.mu.Lock()
			rc.items[key] += bytes.Count(body, []byte(`{"index":`)) + bytes.Count(body, []byte(`{"delete":`))
			rc.mu.Unlock()
		}
		start := time.Now()
		proxy.ServeHTTP(w, r)
		rc.mu.Lock()
		rc.n[key]++
		rc.total[key] += time.Since(start)
		rc.mu.Unlock()
	}))
	b.Cleanup(srv.Close)
	cfg.OpenSearchURL = srv.URL
	return rc
}

// report is the requests per document of each kind, with their mean time
// (and the actions per bulk request).
func (rc *requestCounter) report(docs int) string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var parts []string
	for key, n := range rc.n {
		part := fmt.Sprintf("%s %.2f (%d, mean %.1f ms", key, float64(n)/float64(docs), n, float64(rc.total[key].Microseconds())/1000/float64(n))
		if it := rc.items[key]; it > 0 {
			part += fmt.Sprintf(", %.1f actions each", float64(it)/float64(n))
		}
		parts = append(parts, part+")")
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// ingestOnce starts an instance on cfg, uploads texts (four uploaders) into
// a new knowledge base and returns the chunks made and the time until every
// document was ready or failed.
func ingestOnce(b *testing.B, cfg Config, texts []string) (int, time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, stop, err := startAll(ctx, cfg, newLogger(io.Discard, "error"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	name, size := "bench", 2048
	kb, err := a.kbs.Create(ctx, service.SystemPrincipal(), admin.KnowledgeBaseInput{Name: &name, ChunkSize: &size})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	uploaded := 0
	for range 4 {
		wg.Go(func() {
			for i := range next {
				_, err := a.ingestSvc.Upload(ctx, service.SystemPrincipal(), kb.ID, fmt.Sprintf("d%d.txt", i), strings.NewReader(texts[i]))
				if err != nil && !errors.Is(err, service.ErrConflict) { // the same text twice: one document
					b.Error(err)
					continue
				}
				if err == nil {
					mu.Lock()
					uploaded++
					mu.Unlock()
				}
			}
		})
	}
	for i := range texts {
		next <- i
	}
	close(next)
	wg.Wait()
	// The wait polls one count by status (the database is this round's
	// own): reading every document's row each time cost more CPU than
	// ingesting them, and the more the longer a round took.
	for {
		counts, err := a.store.DocumentCounts(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if int(counts[service.DocumentReady]+counts[service.DocumentFailed]) >= uploaded {
			took := time.Since(start)
			st, err := eval.DocumentStats(ctx, a.ingestSvc, kb.ID)
			if err != nil {
				b.Fatal(err)
			}
			// CMRC has two questions without text: two documents fail
			// with nothing to index, on both backends.
			if st.Failed > 2 {
				b.Errorf("%d documents failed", st.Failed)
			}
			return st.Chunks, took
		}
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("after 10 minutes %d of %d documents ready", counts[service.DocumentReady], uploaded)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpuSeconds is the user and system CPU time of this process ("self") or
// of the OpenSearch node on this machine ("opensearch"; 0 when it is not
// found), from /proc: where an ingestion round's CPU went.
func cpuSeconds(b *testing.B, who string) float64 {
	pid := "self"
	if who == "opensearch" {
		pid = ""
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
			if err == nil && strings.Contains(string(cmd), "org.opensearch.bootstrap.OpenSearch") {
				pid = d.Name()
				break
			}
		}
		if pid == "" {
			return 0
		}
	}
	cpu, ok := procCPU("/proc/" + pid + "/stat")
	if !ok {
		b.Logf("cpu of %s: no /proc/%s/stat", who, pid)
	}
	return cpu
}

// watchDatabaseCPU samples, until the returned func is called, the CPU
// seconds of the Postgres backends serving the database of url (their
// process title names it; the server is on this machine), and that func
// returns their sum: the Postgres work of one round, since each round has
// a database of its own. A backend is sampled every 100 ms, so the work of
// one that exits between two samples is missed; the instance's pool keeps
// its connections for the round.
func watchDatabaseCPU(b *testing.B, url string) func() float64 {
	db := url[strings.LastIndexByte(url, '/')+1:]
	if i := strings.IndexByte(db, '?'); i >= 0 {
		db = db[:i]
	}
	seen := map[string]float64{}
	sample := func() {
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
			if err != nil || !strings.HasPrefix(string(cmd), "postgres: ") || !slices.Contains(strings.Fields(string(cmd)), db) {
				continue
			}
			if cpu, ok := procCPU("/proc/" + d.Name() + "/stat"); ok {
				seen[d.Name()] = max(seen[d.Name()], cpu)
			}
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			sample()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(stop)
		<-done
		var sum float64
		for _, cpu := range seen {
			sum += cpu
		}
		return sum
	}
}

// procCPU is the user and system CPU seconds in a /proc/<pid>/stat file.
func procCPU(path string) (float64, bool) {
	stat, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th, in clock ticks (100 per second on Linux).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	var utime, stime float64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return (utime + stime) / 100, true
}

// loadAverage is the machine's one-minute load average.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
