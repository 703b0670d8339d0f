// Package eval scores retrieval on a BEIR dataset: it reads the dataset,
// ingests its corpus through the real upload path, runs every judged query
// and computes nDCG@10, recall@10 and latency percentiles. `ragent eval`
// wires it to a running App.
package eval

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/ragent-go/ragent/service/retrieve"
)

// Ingester is the part of the ingestion use case eval drives.
type Ingester interface {
	Upload(ctx context.Context, p service.Principal, kbID service.ID, filename string, body io.Reader) (*service.Document, error)
	Documents(ctx context.Context, p service.Principal, kbID, before service.ID, limit int) ([]*service.Document, error)
}

// Searcher is the search /search uses.
type Searcher interface {
	Search(ctx context.Context, p service.Principal, q retrieve.Query) ([]service.SearchResult, error)
}

// Dataset is a BEIR folder read into memory.
type Dataset struct {
	Corpus  []Document
	Queries []Query // judged queries only, in file order
}

type Document struct {
	ID    string `json:"_id"`
	Title string `json:"title"`
	Text  string `json:"text"`
}

type Query struct {
	ID    string         `json:"_id"`
	Text  string         `json:"text"`
	Qrels map[string]int `json:"-"` // corpus id → graded relevance (> 0)
}

func Load(dir string) (*Dataset, error) {
	var ds Dataset
	if err := readJSONL(filepath.Join(dir, "corpus.jsonl"), func(line []byte) error {
		var e Document
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		ds.Corpus = append(ds.Corpus, e)
		return nil
	}); err != nil {
		return nil, err
	}
	qrels, err := readQrels(filepath.Join(dir, "qrels", "test.tsv"))
	if err != nil {
		return nil, err
	}
	if err := readJSONL(filepath.Join(dir, "queries.jsonl"), func(line []byte) error {
		var q Query
		if err := json.Unmarshal(line, &q); err != nil {
			return err
		}
		if q.Qrels = qrels[q.ID]; len(q.Qrels) > 0 {
			ds.Queries = append(ds.Queries, q)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(ds.Corpus) == 0 || len(ds.Queries) == 0 {
		return nil, fmt.Errorf("eval: %s has %d documents and %d judged queries", dir, len(ds.Corpus), len(ds.Queries))
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

type IngestStats struct {
	Ready, Failed, Chunks int
	Elapsed               time.Duration
}

// Ingest uploads every corpus entry as a text document and waits until
// all of them are ready or failed. It returns the corpus id of each document.
func Ingest(ctx context.Context, svc Ingester, kbID service.ID, corpus []Document, uploaders int, progress io.Writer) (IngestStats, map[service.ID]string, error) {
	return IngestFiles(ctx, svc, kbID, corpus, uploaders, progress, TextFile)
}

// TextFile is a corpus document as the text file Ingest uploads: its title,
// a blank line, its text.
func TextFile(e Document) (string, []byte, error) {
	return e.ID + ".txt", []byte(strings.TrimSpace(e.Title + "\n\n" + e.Text)), nil
}

// IngestFiles is Ingest with each document uploaded as the file that file
// makes of it (a scanned PDF of its text, say).
func IngestFiles(ctx context.Context, svc Ingester, kbID service.ID, corpus []Document, uploaders int, progress io.Writer,
	file func(Document) (string, []byte, error)) (IngestStats, map[service.ID]string, error) {
	start := time.Now()
	var (
		mu       sync.Mutex
		docs     = make(map[service.ID]string, len(corpus))
		uploaded atomic.Int64
		firstErr error
		wg       sync.WaitGroup
	)
	next := make(chan Document)
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range uploaders {
		wg.Go(func() {
			for e := range next {
				name, body, err := file(e)
				var doc *service.Document
				if err == nil {
					doc, err = svc.Upload(uctx, service.SystemPrincipal(), kbID, name, bytes.NewReader(body))
				}
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
		})
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
	var st IngestStats
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
		if st, err = DocumentStats(ctx, svc, kbID); err != nil {
			return st, nil, err
		}
		fmt.Fprintf(progress, "eval: %.0fs uploaded %d/%d, ready %d, failed %d, chunks %d\n",
			time.Since(start).Seconds(), uploaded.Load(), len(corpus), st.Ready, st.Failed, st.Chunks)
		if !uploading && st.Ready+st.Failed >= len(docs) {
			st.Elapsed = time.Since(start)
			return st, docs, nil
		}
	}
}

// DocumentStats counts a knowledge base's documents by outcome.
func DocumentStats(ctx context.Context, svc Ingester, kbID service.ID) (IngestStats, error) {
	var st IngestStats
	var before service.ID
	for {
		page, err := svc.Documents(ctx, service.SystemPrincipal(), kbID, before, 1000)
		if err != nil {
			return st, err
		}
		for _, d := range page {
			switch d.Status {
			case service.DocumentReady:
				st.Ready++
				st.Chunks += d.ChunkCount
			case service.DocumentFailed:
				st.Failed++
			}
		}
		if len(page) < 1000 {
			return st, nil
		}
		before = page[len(page)-1].ID
	}
}

type Score struct {
	NDCG, Recall float64
	P50, P99     time.Duration
}

// ScoreMode runs every query in one mode and averages nDCG@10 (trec_eval's
// linear gain, log2 discount) and recall@10 over them. Chunks are mapped to
// their documents and a document counts once, at its best chunk's rank.
func ScoreMode(ctx context.Context, s Searcher, kbID service.ID, mode service.SearchMode, queries []Query, docs map[service.ID]string) (Score, error) {
	const k = 10
	var sc Score
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
		sc.NDCG += NDCGAt(ranked, q.Qrels, k)
		sc.Recall += RecallAt(ranked, q.Qrels, k)
	}
	n := float64(len(queries))
	sc.NDCG /= n
	sc.Recall /= n
	sc.P50, sc.P99 = Percentile(lat, 0.50), Percentile(lat, 0.99)
	return sc, nil
}

// NDCGAt is nDCG@k with graded relevance as gain and a log2(rank+1)
// discount, as trec_eval and BEIR compute it.
func NDCGAt(ranked []string, qrels map[string]int, k int) float64 {
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

// RecallAt is the share of the relevant documents found in the first k.
func RecallAt(ranked []string, qrels map[string]int, k int) float64 {
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

// Percentile is the nearest-rank p-quantile (0 < p <= 1) of durations in any
// order; ds is not modified.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(ds))
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// PeakRSS is the process's peak resident set size in bytes (VmHWM), or 0
// where /proc is not available.
func PeakRSS() int64 {
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
