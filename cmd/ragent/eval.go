package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
	"github.com/ragent-go/ragent/service/retrieve"
)

// evalOptions are the flags of `ragent eval`.
type evalOptions struct {
	dataset      string
	modes        []service.SearchMode
	limitQueries int
	keep         bool
	chunkSize    int
	chunkOverlap int
	vectorWeight float64 // < 0: the embedding provider's default
	uploaders    int
	reuse        string // id of a kept evaluation knowledge base
}

func parseEvalFlags(args []string, stderr io.Writer) (evalOptions, error) {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o evalOptions
	fs.StringVar(&o.dataset, "dataset", "", "BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv")
	mode := fs.String("mode", "all", "all, hybrid, keyword or vector")
	fs.IntVar(&o.limitQueries, "limit-queries", 0, "score only the first N judged queries (0: all)")
	fs.BoolVar(&o.keep, "keep", false, "keep the evaluation knowledge base afterwards")
	// Abstracts and paragraphs are short: one chunk each lets document-level
	// judgements score chunks directly, as the BEIR baselines do.
	fs.IntVar(&o.chunkSize, "chunk-size", 2048, "target tokens per chunk of the evaluation knowledge base")
	fs.IntVar(&o.chunkOverlap, "chunk-overlap", 64, "overlap tokens between chunks")
	fs.Float64Var(&o.vectorWeight, "vector-weight", -1, "hybrid weight of the vector list (default: the embedding provider's)")
	fs.IntVar(&o.uploaders, "uploaders", 4, "concurrent uploads")
	fs.StringVar(&o.reuse, "knowledge-base", "", "score a knowledge base kept by an earlier run (--keep) instead of ingesting again")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.dataset == "" {
		return o, errors.New("eval: --dataset is required")
	}
	switch m := service.SearchMode(*mode); {
	case *mode == "all":
		o.modes = []service.SearchMode{service.SearchHybrid, service.SearchKeyword, service.SearchVector}
	case m.Valid():
		o.modes = []service.SearchMode{m}
	default:
		return o, fmt.Errorf("eval: --mode %q: must be all, hybrid, keyword or vector", *mode)
	}
	if o.uploaders < 1 {
		o.uploaders = 1
	}
	return o, nil
}

// evalDataset is a BEIR folder read into memory.
type evalDataset struct {
	corpus  []corpusEntry
	queries []evalQuery // judged queries only, in file order
}

type corpusEntry struct {
	ID    string `json:"_id"`
	Title string `json:"title"`
	Text  string `json:"text"`
}

type evalQuery struct {
	ID    string         `json:"_id"`
	Text  string         `json:"text"`
	qrels map[string]int // corpus id → graded relevance (> 0)
}

func loadDataset(dir string) (*evalDataset, error) {
	var ds evalDataset
	if err := readJSONL(filepath.Join(dir, "corpus.jsonl"), func(line []byte) error {
		var e corpusEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		ds.corpus = append(ds.corpus, e)
		return nil
	}); err != nil {
		return nil, err
	}
	qrels, err := readQrels(filepath.Join(dir, "qrels", "test.tsv"))
	if err != nil {
		return nil, err
	}
	if err := readJSONL(filepath.Join(dir, "queries.jsonl"), func(line []byte) error {
		var q evalQuery
		if err := json.Unmarshal(line, &q); err != nil {
			return err
		}
		if q.qrels = qrels[q.ID]; len(q.qrels) > 0 {
			ds.queries = append(ds.queries, q)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(ds.corpus) == 0 || len(ds.queries) == 0 {
		return nil, fmt.Errorf("eval: %s has %d documents and %d judged queries", dir, len(ds.corpus), len(ds.queries))
	}
	return &ds, nil
}

func readJSONL(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	return sc.Err()
}

// readQrels reads query-id, corpus-id, score lines; the header and
// non-positive judgements are skipped (they mark no relevance).
func readQrels(path string) (map[string]map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		score, err := strconv.Atoi(fields[len(fields)-1])
		if err != nil || score <= 0 {
			continue
		}
		if out[fields[0]] == nil {
			out[fields[0]] = map[string]int{}
		}
		out[fields[0]][fields[1]] = score
	}
	return out, sc.Err()
}

// evalCommand runs `ragent eval`: a fresh knowledge base, the corpus ingested
// through the real pipeline (upload → outbox → relay → MQ → consumer), then
// every judged query through the searcher /search uses.
func evalCommand(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	opts, err := parseEvalFlags(args, stderr)
	if err != nil {
		return err
	}
	ds, err := loadDataset(opts.dataset)
	if err != nil {
		return err
	}

	// One instance with every role: its relay, consumer and reaper run while
	// eval drives the use cases directly.
	cfg.Role = "all"
	a, err := newApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx, nil) }()
	defer func() {
		stop()
		<-done
	}()

	var (
		kb   *service.KnowledgeBase
		docs map[service.ID]string
	)
	if opts.reuse != "" {
		if kb, docs, err = reuseKnowledgeBase(ctx, a, opts); err != nil {
			return err
		}
	} else {
		name := fmt.Sprintf("eval-%s-%s", filepath.Base(filepath.Clean(opts.dataset)), time.Now().UTC().Format("20060102-150405.000"))
		in := admin.KnowledgeBaseInput{Name: &name, ChunkSize: &opts.chunkSize, ChunkOverlap: &opts.chunkOverlap}
		if opts.vectorWeight >= 0 {
			in.VectorWeight = &opts.vectorWeight
		}
		if kb, err = a.kbs.Create(ctx, service.SystemPrincipal(), in); err != nil {
			return fmt.Errorf("create knowledge base: %w", err)
		}
		if !opts.keep {
			defer func() {
				if err := a.kbs.Delete(context.WithoutCancel(ctx), service.SystemPrincipal(), kb.ID); err != nil {
					fmt.Fprintf(stderr, "eval: delete knowledge base %s: %v\n", kb.Name, err)
				}
			}()
		}
		fmt.Fprintf(stderr, "eval: knowledge base %s (id %s, chunk size %d, vector weight %.2f, mq %s)\n",
			kb.Name, kb.ID, kb.ChunkSize, kb.VectorWeight, cfg.MQDriver)
		var st ingestStats
		if st, docs, err = ingestCorpus(ctx, a, kb.ID, ds.corpus, opts.uploaders, stderr); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ingest documents=%d failed=%d chunks=%d seconds=%.1f chunks_per_s=%.1f\n",
			st.ready, st.failed, st.chunks, st.elapsed.Seconds(), float64(st.chunks)/st.elapsed.Seconds())
	}

	queries := ds.queries
	if opts.limitQueries > 0 && opts.limitQueries < len(queries) {
		queries = queries[:opts.limitQueries]
	}
	for _, mode := range opts.modes {
		s, err := scoreMode(ctx, a.searcher, kb.ID, mode, queries, docs)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "mode=%s ndcg@10=%.4f recall@10=%.4f p50_ms=%.1f p99_ms=%.1f queries=%d\n",
			mode, s.ndcg, s.recall, ms(s.p50), ms(s.p99), len(queries))
	}
	if hwm := peakRSS(); hwm > 0 {
		fmt.Fprintf(stdout, "peak_rss_mb=%.0f\n", float64(hwm)/(1<<20))
	}
	return nil
}

// reuseKnowledgeBase loads a knowledge base kept by an earlier run, mapping
// its documents back to corpus ids by their names, and applies
// --vector-weight to it.
func reuseKnowledgeBase(ctx context.Context, a *App, opts evalOptions) (*service.KnowledgeBase, map[service.ID]string, error) {
	id, err := service.ParseID(opts.reuse)
	if err != nil {
		return nil, nil, fmt.Errorf("eval: --knowledge-base %q: %w", opts.reuse, err)
	}
	kb, err := a.kbs.Get(ctx, service.SystemPrincipal(), id)
	if err != nil {
		return nil, nil, fmt.Errorf("eval: --knowledge-base %s: %w", opts.reuse, err)
	}
	if opts.vectorWeight >= 0 && opts.vectorWeight != kb.VectorWeight {
		if kb, err = a.kbs.Update(ctx, service.SystemPrincipal(), id, admin.KnowledgeBaseInput{VectorWeight: &opts.vectorWeight}); err != nil {
			return nil, nil, err
		}
	}
	docs := map[service.ID]string{}
	var before service.ID
	for {
		page, err := a.ingestSvc.Documents(ctx, service.SystemPrincipal(), id, before, 1000)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range page {
			docs[d.ID] = strings.TrimSuffix(d.Name, ".txt")
		}
		if len(page) < 1000 {
			return kb, docs, nil
		}
		before = page[len(page)-1].ID
	}
}

type ingestStats struct {
	ready, failed, chunks int
	elapsed               time.Duration
}

// ingestCorpus uploads every corpus entry as a text document and waits until
// all of them are ready or failed. It returns the corpus id of each document.
func ingestCorpus(ctx context.Context, a *App, kbID service.ID, corpus []corpusEntry, uploaders int, stderr io.Writer) (ingestStats, map[service.ID]string, error) {
	start := time.Now()
	var (
		mu       sync.Mutex
		docs     = make(map[service.ID]string, len(corpus))
		uploaded atomic.Int64
		firstErr error
		wg       sync.WaitGroup
	)
	next := make(chan corpusEntry)
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range uploaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range next {
				body := strings.TrimSpace(e.Title + "\n\n" + e.Text)
				doc, err := a.ingestSvc.Upload(uctx, service.SystemPrincipal(), kbID, e.ID+".txt", strings.NewReader(body))
				var se *service.Error
				if errors.As(err, &se) && errors.Is(err, service.ErrConflict) && se.Details["documentId"] != "" {
					// The same text under two ids: one document answers for
					// the first id, as a search engine would return it once.
					err = nil
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("upload %s: %w", e.ID, err)
					cancel()
				}
				if doc != nil {
					docs[doc.ID] = e.ID
				}
				mu.Unlock()
				uploaded.Add(1)
			}
		}()
	}
	go func() {
		defer close(next)
		for _, e := range corpus {
			select {
			case next <- e:
			case <-uctx.Done():
				return
			}
		}
	}()

	// Progress while uploading and ingesting.
	var st ingestStats
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	uploadsDone := make(chan struct{})
	go func() { wg.Wait(); close(uploadsDone) }()
	uploading := true
	for {
		select {
		case <-ctx.Done():
			return st, nil, ctx.Err()
		case <-uploadsDone:
			uploadsDone, uploading = nil, false
			if firstErr != nil {
				return st, nil, firstErr
			}
			continue
		case <-tick.C:
		}
		var err error
		if st, err = documentStats(ctx, a, kbID); err != nil {
			return st, nil, err
		}
		fmt.Fprintf(stderr, "eval: %.0fs uploaded %d/%d, ready %d, failed %d, chunks %d\n",
			time.Since(start).Seconds(), uploaded.Load(), len(corpus), st.ready, st.failed, st.chunks)
		if !uploading && st.ready+st.failed >= len(docs) {
			st.elapsed = time.Since(start)
			return st, docs, nil
		}
	}
}

// documentStats counts a knowledge base's documents by outcome.
func documentStats(ctx context.Context, a *App, kbID service.ID) (ingestStats, error) {
	var st ingestStats
	var before service.ID
	for {
		page, err := a.ingestSvc.Documents(ctx, service.SystemPrincipal(), kbID, before, 1000)
		if err != nil {
			return st, err
		}
		for _, d := range page {
			switch d.Status {
			case service.DocumentReady:
				st.ready++
				st.chunks += d.ChunkCount
			case service.DocumentFailed:
				st.failed++
			}
		}
		if len(page) < 1000 {
			return st, nil
		}
		before = page[len(page)-1].ID
	}
}

type modeScore struct {
	ndcg, recall float64
	p50, p99     time.Duration
}

// scoreMode runs every query in one mode and averages nDCG@10 (trec_eval's
// linear gain, log2 discount) and recall@10 over them. Chunks are mapped to
// their documents and a document counts once, at its best chunk's rank.
func scoreMode(ctx context.Context, s *retrieve.Searcher, kbID service.ID, mode service.SearchMode, queries []evalQuery, docs map[service.ID]string) (modeScore, error) {
	const k = 10
	var sc modeScore
	lat := make([]time.Duration, 0, len(queries))
	for _, q := range queries {
		if strings.TrimSpace(q.Text) == "" {
			// /search refuses an empty query; it finds nothing and scores 0.
			continue
		}
		t0 := time.Now()
		// topK 50 (Search's maximum) leaves room for several chunks of one
		// document; with one chunk per document the first ten are the same
		// as topK 10.
		res, err := s.Search(ctx, service.SystemPrincipal(), retrieve.Query{Text: q.Text, KnowledgeBaseIDs: []service.ID{kbID}, TopK: 50, Mode: mode})
		lat = append(lat, time.Since(t0))
		if err != nil {
			return sc, fmt.Errorf("search %q (%s): %w", q.ID, mode, err)
		}
		ranked := make([]string, 0, k)
		seen := map[string]bool{}
		for _, r := range res {
			id, ok := docs[r.DocumentID]
			if !ok || seen[id] {
				continue
			}
			seen[id] = true
			if ranked = append(ranked, id); len(ranked) == k {
				break
			}
		}
		sc.ndcg += ndcgAt(ranked, q.qrels, k)
		sc.recall += recallAt(ranked, q.qrels, k)
	}
	n := float64(len(queries))
	sc.ndcg /= n
	sc.recall /= n
	slices.Sort(lat)
	sc.p50, sc.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return sc, nil
}

// ndcgAt is nDCG@k with graded relevance as gain and a log2(rank+1)
// discount, as trec_eval and BEIR compute it.
func ndcgAt(ranked []string, qrels map[string]int, k int) float64 {
	var dcg float64
	for i, id := range ranked[:min(k, len(ranked))] {
		dcg += float64(qrels[id]) / math.Log2(float64(i+2))
	}
	ideal := make([]int, 0, len(qrels))
	for _, g := range qrels {
		ideal = append(ideal, g)
	}
	slices.SortFunc(ideal, func(a, b int) int { return b - a })
	var idcg float64
	for i, g := range ideal[:min(k, len(ideal))] {
		idcg += float64(g) / math.Log2(float64(i+2))
	}
	if idcg == 0 {
		return 0
	}
	return dcg / idcg
}

// recallAt is the share of the relevant documents found in the first k.
func recallAt(ranked []string, qrels map[string]int, k int) float64 {
	if len(qrels) == 0 {
		return 0
	}
	found := 0
	for _, id := range ranked[:min(k, len(ranked))] {
		if qrels[id] > 0 {
			found++
		}
	}
	return float64(found) / float64(len(qrels))
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// peakRSS is the process's peak resident set size in bytes (VmHWM), or 0
// where /proc is not available.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
