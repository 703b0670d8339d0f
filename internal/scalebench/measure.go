package scalebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
)

// Searcher is the search /search uses, called in-process.
type Searcher interface {
	Search(ctx context.Context, p service.Principal, q retrieve.Query) ([]service.SearchResult, error)
}

// SearchFunc runs one query and returns the contents of its results, best
// first.
type SearchFunc func(ctx context.Context, query string, mode service.SearchMode) ([]string, error)

// InProcess searches kb through the searcher, as the principal p.
func InProcess(s Searcher, p service.Principal, kb service.ID) SearchFunc {
	return func(ctx context.Context, query string, mode service.SearchMode) ([]string, error) {
		res, err := s.Search(ctx, p, retrieve.Query{Text: query, KnowledgeBaseIDs: []service.ID{kb}, TopK: 10, Mode: mode})
		if err != nil {
			return nil, err
		}
		out := make([]string, len(res))
		for i, r := range res {
			out[i] = r.Content
		}
		return out, nil
	}
}

// OverHTTP searches kb through POST /api/v1/search of the server at base,
// with a bearer token.
func OverHTTP(client *http.Client, base, token string, kb service.ID) SearchFunc {
	return func(ctx context.Context, query string, mode service.SearchMode) ([]string, error) {
		body, _ := json.Marshal(retrieve.Query{Text: query, KnowledgeBaseIDs: []service.ID{kb}, TopK: 10, Mode: mode})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/search", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("scalebench: /search: %d %s", resp.StatusCode, raw)
		}
		var out struct{ Results []service.SearchResult }
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, fmt.Errorf("scalebench: /search: %w", err)
		}
		contents := make([]string, len(out.Results))
		for i, r := range out.Results {
			contents[i] = r.Content
		}
		return contents, nil
	}
}

// BenchQuery is one timed query and the text of its source document.
type BenchQuery struct {
	ID     string
	Text   string
	Source string // the text of the document it was drawn from
}

// Queries returns the first n queries about the corpus's first docs
// documents.
func (g *Generator) Queries(n, docs int) []BenchQuery {
	out := make([]BenchQuery, n)
	for i := range out {
		t, d := g.QueryAt(i, docs)
		out[i] = BenchQuery{ID: QueryID(i), Text: t, Source: g.Doc(d).Text}
	}
	return out
}

// Latency summarises one mode on one path.
type Latency struct {
	P50, P99 time.Duration
	// Hit10 is the share of queries whose source document is in the top
	// 10: a check that the index answers, not a quality measure.
	Hit10 float64
}

// Timing is the result of Time: one Latency per mode and path.
type Timing map[service.SearchMode]map[string]Latency

// Time runs every query once untimed (to warm the caches the same way for
// every path), then once per mode on every path, the paths interleaved
// query by query so they see the same machine.
func Time(ctx context.Context, queries []BenchQuery, modes []service.SearchMode, paths map[string]SearchFunc) (Timing, error) {
	names := make([]string, 0, len(paths))
	for name := range paths {
		names = append(names, name)
	}
	slices.Sort(names)
	out := Timing{}
	for _, mode := range modes {
		warm := paths[names[0]]
		for _, q := range queries {
			if _, err := warm(ctx, q.Text, mode); err != nil {
				return nil, fmt.Errorf("scalebench: %s %s: %w", mode, q.ID, err)
			}
		}
		lat := make(map[string][]time.Duration, len(names))
		hits := make(map[string]int, len(names))
		for _, q := range queries {
			for _, name := range names {
				start := time.Now()
				res, err := paths[name](ctx, q.Text, mode)
				if err != nil {
					return nil, fmt.Errorf("scalebench: %s %s %s: %w", name, mode, q.ID, err)
				}
				lat[name] = append(lat[name], time.Since(start))
				if slices.Contains(res, q.Source) {
					hits[name]++
				}
			}
		}
		out[mode] = map[string]Latency{}
		for _, name := range names {
			out[mode][name] = summarize(lat[name], hits[name])
		}
	}
	return out, nil
}

// summarize returns the latency of timed queries, hits of which found
// their source.
func summarize(lat []time.Duration, hits int) Latency {
	p50, p99 := Percentiles(lat)
	return Latency{P50: p50, P99: p99, Hit10: float64(hits) / float64(max(1, len(lat)))}
}

// inMS is l in milliseconds, for JSON.
func (l Latency) inMS() LatencyMS { return LatencyMS{P50: ms(l.P50), P99: ms(l.P99), Hit10: l.Hit10} }

// Percentiles returns the nearest-rank 50th and 99th percentiles.
func Percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(len(s)-1, i))]
	}
	return rank(0.50), rank(0.99)
}
