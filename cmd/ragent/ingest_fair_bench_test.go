package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// BenchmarkFairIngestUnderEmbeddingBudget is issue 28's second target: a
// 5,000-chunk import (100 documents of 20 sections, about 50 chunks each) into knowledge base A
// through instance a, under an embedding token budget of 8,000 tokens a
// second (RAGENT_EMBEDDING_TOKENS_PER_MINUTE with a one-second window),
// while 10 users search another knowledge base through instance b, each one search after another
// with 100 ms between; then a 20-chunk upload into knowledge base B. The
// model is an in-test server whose call costs 2 ms + 5 ms per text, four
// calls at once (RAGENT_EMBEDDING_CONCURRENCY). Reported, with no import
// and during it, the same run: /search p50; a search's embedding p50,
// from its request to its question's vector computed at the model server
// (ragent's handling before the call, the gate's wait and the call), and
// its two parts: to the call reaching the model server (the handling and
// the gate) and the model server's; the query embedding's mean (ragent_embed_seconds, gate wait included); how many of A's
// documents were ready when B's was, and A's chunks. "no-budget" is the
// same without the budget, to tell the budget's share of the slowdown from
// the ingestion's CPU on the same machine.
//
//	go test ./cmd/ragent -run '^$' -bench FairIngestUnderEmbeddingBudget -benchtime 1x
func BenchmarkFairIngestUnderEmbeddingBudget(b *testing.B) {
	for _, mode := range []struct {
		name   string
		tokens int
	}{{"budget", 8_000}, {"no-budget", 0}} {
		b.Run(mode.name, func(b *testing.B) { fairIngestUnderBudget(b, mode.tokens) })
	}
}

// fairIngestUnderBudget is one run of the benchmark with a budget of tokens
// a second (0: none).
func fairIngestUnderBudget(b *testing.B, tokens int) {
	const users, bulkDocs, sections = 10, 100, 20
	fake := newFakeEmbedServer(b, 64)
	fake.cost = func(n int) time.Duration { return 2*time.Millisecond + time.Duration(n)*5*time.Millisecond }
	// A search's embedding time: from the request to its question's vector
	// computed (the gate's wait and the call included).
	var answered sync.Map // query text → time.Time
	fake.answered = func(q string) { answered.Store(q, time.Now()) }
	var arrived sync.Map
	fake.arrived = func(q string) { arrived.Store(q, time.Now()) }
	cfg := embedConfig(b, fake, 4)
	cfg.EmbedTokensPerMinute, cfg.BudgetWindow = tokens, time.Second
	var ins [2]*instance
	for i, name := range []string{"a", "b"} {
		c := cfg
		c.InstanceID = name
		ins[i] = start(b, c)
	}
	token := ins[1].login(b, "admin", "admin-password")
	ca, cb := ins[0].adminClient(b), ins[1].client(b, token)
	// The users search a knowledge base of their own, the same size in
	// both phases.
	kbS, kbA, kbB := benchKB(b, cb), ca.createKBWith("import", 64), cb.createKBWith("small", 64)
	var searchers []*client
	for u := range users {
		name := fmt.Sprintf("searcher%d", u)
		ins[1].createUser(b, token, name, name+"-password", "admin")
		searchers = append(searchers, ins[1].client(b, ins[1].login(b, name, name+"-password")))
	}

	// search runs the 10 users until stop closes and returns the /search
	// times, the searches' embedding times and their parts: to the call
	// reaching the model server (ragent's handling and the gate's wait),
	// and the model server's.
	var n atomic.Int64 // every query is new: no cache answers it
	search := func(stop <-chan struct{}) (out, embeds, calls, model []time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var failed atomic.Value
		for u, c := range searchers {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					q := fmt.Sprintf("query pallet%d rotation forklift%d q%d", i%50, u, n.Add(1))
					start := time.Now()
					d, err := timedSearchOnce(c, kbS, q)
					if err != nil {
						failed.Store(err)
						return
					}
					at, ok := answered.Load(q)
					if !ok {
						failed.Store(fmt.Errorf("the model server never answered %q", q))
						return
					}
					mu.Lock()
					out = append(out, d)
					embeds = append(embeds, at.(time.Time).Sub(start))
					if ar, ok := arrived.Load(q); ok {
						calls = append(calls, ar.(time.Time).Sub(start))
						model = append(model, at.(time.Time).Sub(ar.(time.Time)))
					}
					mu.Unlock()
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		slices.Sort(out)
		slices.Sort(embeds)
		slices.Sort(calls)
		slices.Sort(model)
		return out, embeds, calls, model
	}
	for i := range 3 {
		timedSearchOnce(searchers[0], kbS, fmt.Sprintf("query warm up %d", i)) // connections and caches
	}

	// No import: 10 users for about as many searches as the import's phase
	// makes in 10 s.
	stop := make(chan struct{})
	q0 := queryEmbedStats(b, ins[1])
	go func() { time.Sleep(10 * time.Second); close(stop) }()
	idle, idleEmbeds, idleCalls, idleModel := search(stop)
	idleEmbed := queryEmbedStats(b, ins[1]).since(q0)

	bulk := uploadBulk(ca, kbA, bulkDocs, sections, "\n\n", strings.Repeat("Inventory counts are reconciled weekly against the ledger. ", 6)+"\n\n")
	small := uploadBulk(cb, kbB, 1, 10, "\n\n", strings.Repeat("Badge readers log every door opened after hours. ", 6)+"\n\n")[0]
	stop = make(chan struct{})
	var busy, busyEmbeds, busyCalls, busyModel []time.Duration
	done := make(chan struct{})
	q1 := queryEmbedStats(b, ins[1])
	go func() { busy, busyEmbeds, busyCalls, busyModel = search(stop); close(done) }()
	cb.waitDone(small, 10*time.Minute)
	allReady := func() bool {
		for _, id := range bulk {
			if ca.document(id).Status != "ready" {
				return false
			}
		}
		return true
	}
	testenv.Eventually(b, 30*time.Minute, "the import ready", allReady)
	close(stop)
	<-done
	busyEmbed := queryEmbedStats(b, ins[1]).since(q1)

	chunks := 0
	for _, id := range bulk {
		chunks += ca.document(id).ChunkCount
	}
	p50 := func(d []time.Duration) float64 { return float64(d[len(d)/2].Microseconds()) / 1000 }
	b.ReportMetric(p50(idle), "idle-search-p50-ms")
	b.ReportMetric(p50(busy), "import-search-p50-ms")
	b.ReportMetric(p50(busy)/p50(idle), "search-p50-ratio")
	b.ReportMetric(p50(idleEmbeds), "idle-embed-p50-ms")
	b.ReportMetric(p50(busyEmbeds), "import-embed-p50-ms")
	b.ReportMetric(p50(busyEmbeds)/p50(idleEmbeds), "embed-p50-ratio")
	b.ReportMetric(p50(idleCalls), "idle-to-call-p50-ms")
	b.ReportMetric(p50(busyCalls), "import-to-call-p50-ms")
	b.ReportMetric(p50(idleModel), "idle-model-p50-ms")
	b.ReportMetric(p50(busyModel), "import-model-p50-ms")
	b.ReportMetric(idleEmbed.mean(), "idle-query-embed-mean-ms")
	b.ReportMetric(busyEmbed.mean(), "import-query-embed-mean-ms")
	b.ReportMetric(float64(len(idle)), "idle-searches")
	b.ReportMetric(float64(len(busy)), "import-searches")
	b.ReportMetric(float64(readyBefore(b, cfg, kbA, small)), "import-docs-ready-before-small")
	b.ReportMetric(float64(chunks), "import-chunks")
	b.ReportMetric(float64(cb.document(small).ChunkCount), "small-chunks")
}

// timedSearchOnce runs one hybrid /search of query in kb and returns its time.
func timedSearchOnce(c *client, kb, query string) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "knowledgeBaseIds": []string{kb}, "mode": "hybrid"})
	req, err := http.NewRequest("POST", c.base+"/api/v1/search", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req, nil)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("search: %d", resp.StatusCode)
	}
	return time.Since(start), nil
}

// embedStats is ragent_embed_seconds{kind="query"}'s sum and count.
type embedStats struct{ sum, count float64 }

func (s embedStats) since(before embedStats) embedStats {
	return embedStats{s.sum - before.sum, s.count - before.count}
}

// mean is the mean time in ms.
func (s embedStats) mean() float64 {
	if s.count == 0 {
		return 0
	}
	return s.sum / s.count * 1000
}

// queryEmbedStats reads the query embeddings' time from in's /metrics.
func queryEmbedStats(t testing.TB, in *instance) embedStats {
	t.Helper()
	var s embedStats
	sc := bufio.NewScanner(bytes.NewReader(in.client(t, "").do("GET", "/metrics", nil).Body))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		switch name {
		case `ragent_embed_seconds_sum{kind="query"}`:
			s.sum = v
		case `ragent_embed_seconds_count{kind="query"}`:
			s.count = v
		}
	}
	return s
}
