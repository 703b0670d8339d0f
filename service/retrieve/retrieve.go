// Package retrieve is hybrid retrieval: BM25 keyword search and vector search
// run side by side, fused with weighted Reciprocal Rank Fusion, optionally
// reranked, then gated by a minimum score.
package retrieve

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// Store reads knowledge bases and runs the two searches.
type Store interface {
	KnowledgeBasesIn(ctx context.Context, ids []service.ID, after service.ID, limit int) ([]*service.KnowledgeBase, error)
	KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchResult, error)
	VectorSearch(ctx context.Context, q service.VectorQuery) ([]service.SearchResult, error)
}

// Reranker scores documents against a query (higher is more relevant).
type Reranker interface {
	Rerank(ctx context.Context, query string, docs []string) ([]float64, error)
}

// Config tunes retrieval. Zero values take the defaults.
type Config struct {
	K1, B      float64 // BM25; defaults 0.9 and 0.4 (Lucene's)
	Candidates int     // per list before fusion; default 50
	RRFK       float64 // RRF constant; default 60
	// MinVectorScore is the cosine similarity a chunk found only by vector
	// search needs to count as relevant. Keyword hits always count: they
	// share a term with the question.
	MinVectorScore float64
	// MinRerankScore gates results by the reranker's score when one is set.
	MinRerankScore float64
	RerankTop      int          // how many fused results to rerank; default 20
	MaxTopK        int          // default 50
	Logger         *slog.Logger // nil discards
}

func (c *Config) defaults() {
	if c.K1 == 0 {
		c.K1 = 0.9
	}
	if c.B == 0 {
		c.B = 0.4
	}
	if c.Candidates == 0 {
		c.Candidates = 50
	}
	if c.RRFK == 0 {
		c.RRFK = 60
	}
	if c.RerankTop == 0 {
		c.RerankTop = 20
	}
	if c.MaxTopK == 0 {
		c.MaxTopK = 50
	}
}

// Searcher answers search queries.
type Searcher struct {
	store    Store
	access   *service.Access
	embedder service.Embedder
	reranker Reranker // may be nil
	cfg      Config
	log      *slog.Logger
}

// New returns a Searcher; access decides which knowledge bases a caller
// searches. reranker may be nil.
func New(store Store, access *service.Access, embedder service.Embedder, reranker Reranker, cfg Config) *Searcher {
	cfg.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Searcher{store: store, access: access, embedder: embedder, reranker: reranker, cfg: cfg, log: cfg.Logger}
}

// Query is a search request.
type Query struct {
	Text             string             `json:"query"`
	KnowledgeBaseIDs []service.ID       `json:"knowledgeBaseIds"`
	TopK             int                `json:"topK"`
	Mode             service.SearchMode `json:"mode"`
}

// Search returns the TopK most relevant chunks of the chosen knowledge bases
// (every one p may read when none are named) that pass the relevance gate.
// A named knowledge base p may not read is service.ErrNotFound, exactly as
// one that does not exist: never quietly left out of the results.
func (s *Searcher) Search(ctx context.Context, p service.Principal, q Query) ([]service.SearchResult, error) {
	q.Text = strings.TrimSpace(q.Text)
	if q.Text == "" {
		return nil, service.Errorf(service.ErrInvalid, "query must not be empty")
	}
	if utf8.RuneCountInString(q.Text) > service.MaxQuestionRunes {
		return nil, service.Errorf(service.ErrInvalid, "query must be at most %d characters", service.MaxQuestionRunes)
	}
	if q.Mode == "" {
		q.Mode = service.SearchHybrid
	}
	if !q.Mode.Valid() {
		return nil, service.Errorf(service.ErrInvalid, "mode must be hybrid, keyword or vector")
	}
	if q.TopK == 0 {
		q.TopK = 5
	}
	if q.TopK < 1 || q.TopK > s.cfg.MaxTopK {
		return nil, service.Errorf(service.ErrInvalid, "topK must be between 1 and %d", s.cfg.MaxTopK)
	}
	kbs, err := s.knowledgeBases(ctx, p, q.KnowledgeBaseIDs)
	if err != nil || len(kbs) == 0 {
		return nil, err
	}

	var keyword, vector []service.SearchResult
	if q.Mode != service.SearchVector {
		if keyword, err = s.keyword(ctx, q.Text, kbs); err != nil {
			return nil, err
		}
	}
	if q.Mode != service.SearchKeyword {
		if vector, err = s.vector(ctx, q.Text, kbs); err != nil {
			return nil, err
		}
	}

	var results []service.SearchResult
	switch q.Mode {
	case service.SearchKeyword:
		results = keyword
	case service.SearchVector:
		results = gateVector(vector, s.cfg.MinVectorScore)
	default:
		results = Fuse(keyword, gateVector(vector, s.cfg.MinVectorScore), vectorWeight(kbs), s.cfg.RRFK)
	}
	if s.reranker != nil && len(results) > 0 {
		if results, err = s.rerank(ctx, q.Text, results); err != nil {
			return nil, err
		}
	}
	if len(results) > q.TopK {
		results = results[:q.TopK]
	}
	return results, nil
}

// knowledgeBases resolves the ids p may read (all of them when ids is
// empty); any named id p cannot read fails the whole query.
func (s *Searcher) knowledgeBases(ctx context.Context, p service.Principal, ids []service.ID) ([]*service.KnowledgeBase, error) {
	if len(ids) > 100 {
		return nil, service.Errorf(service.ErrInvalid, "at most 100 knowledge bases per query")
	}
	var want []service.ID
	if len(ids) == 0 {
		readable, err := s.access.Readable(ctx, p)
		if err != nil {
			return nil, err
		}
		if len(readable) == 0 {
			return nil, nil
		}
		want = readable
	} else {
		roles, err := s.access.Roles(ctx, p, ids)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if _, ok := roles[id]; !ok {
				return nil, service.Errorf(service.ErrNotFound, "knowledge base %s not found", id)
			}
		}
		want = ids
	}
	kbs, err := s.store.KnowledgeBasesIn(ctx, want, 0, 0)
	if err != nil {
		return nil, err
	}
	if len(ids) > 0 {
		// Deleted between the access check and the read.
		found := make(map[service.ID]bool, len(kbs))
		for _, kb := range kbs {
			found[kb.ID] = true
		}
		for _, id := range ids {
			if !found[id] {
				return nil, service.Errorf(service.ErrNotFound, "knowledge base %s not found", id)
			}
		}
	}
	return kbs, nil
}

func (s *Searcher) keyword(ctx context.Context, query string, kbs []*service.KnowledgeBase) ([]service.SearchResult, error) {
	terms, counts := termCounts(text.Tokenize(query))
	if len(terms) == 0 {
		return nil, nil
	}
	return s.store.KeywordSearch(ctx, service.KeywordQuery{
		KnowledgeBaseIDs: kbIDs(kbs), Terms: terms, Counts: counts, K1: s.cfg.K1, B: s.cfg.B, Limit: s.cfg.Candidates,
	})
}

// vector searches the knowledge bases embedded with the configured model;
// others (embedded by a model this instance does not run) are searched by
// keyword only, and a log line says so.
func (s *Searcher) vector(ctx context.Context, query string, kbs []*service.KnowledgeBase) ([]service.SearchResult, error) {
	var ids []service.ID
	for _, kb := range kbs {
		if kb.EmbeddingModel == s.embedder.Model() && kb.EmbeddingDim == s.embedder.Dim() {
			ids = append(ids, kb.ID)
		} else {
			s.log.WarnContext(ctx, "knowledge base embedded with another model; vector search skipped",
				"knowledge_base", kb.ID, "model", kb.EmbeddingModel, "dim", kb.EmbeddingDim)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	vecs, err := s.embedder.Embed(ctx, []string{query})
	if err != nil {
		return nil, fmt.Errorf("embed query: %w", err)
	}
	if len(vecs) != 1 || isZero(vecs[0]) {
		return nil, nil
	}
	return s.store.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: ids, Vector: vecs[0], Limit: s.cfg.Candidates})
}

func (s *Searcher) rerank(ctx context.Context, query string, results []service.SearchResult) ([]service.SearchResult, error) {
	n := min(len(results), s.cfg.RerankTop)
	docs := make([]string, n)
	for i := range docs {
		docs[i] = results[i].Content
	}
	scores, err := s.reranker.Rerank(ctx, query, docs)
	if err != nil {
		// A failed reranker degrades to the fused order rather than failing
		// the search.
		s.log.WarnContext(ctx, "rerank failed; using fused order", "err", err)
		return results, nil
	}
	out := make([]service.SearchResult, 0, n)
	for i := 0; i < n && i < len(scores); i++ {
		if scores[i] >= s.cfg.MinRerankScore {
			r := results[i]
			r.Score = scores[i]
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
	return out, nil
}

// Fuse merges two ranked lists with weighted Reciprocal Rank Fusion:
// score(c) = 1/(k + rank_keyword(c)) + w/(k + rank_vector(c)), ranks from 1.
// The keyword list weighs 1 and the vector list w.
func Fuse(keyword, vector []service.SearchResult, w, k float64) []service.SearchResult {
	byID := make(map[service.ID]*service.SearchResult, len(keyword)+len(vector))
	var order []service.ID
	add := func(list []service.SearchResult, weight float64) {
		if weight <= 0 {
			return
		}
		for i, r := range list {
			e, ok := byID[r.ChunkID]
			if !ok {
				c := r
				c.Score = 0
				e = &c
				byID[r.ChunkID] = e
				order = append(order, r.ChunkID)
			}
			e.Score += weight / (k + float64(i+1))
		}
	}
	add(keyword, 1)
	add(vector, w)
	out := make([]service.SearchResult, len(order))
	for i, id := range order {
		out[i] = *byID[id]
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
	return out
}

func gateVector(results []service.SearchResult, min float64) []service.SearchResult {
	out := results[:0:0]
	for _, r := range results {
		if r.Score >= min {
			out = append(out, r)
		}
	}
	return out
}

// vectorWeight is the mean vector weight of the knowledge bases searched.
func vectorWeight(kbs []*service.KnowledgeBase) float64 {
	if len(kbs) == 0 {
		return 0
	}
	var sum float64
	for _, kb := range kbs {
		sum += kb.VectorWeight
	}
	return sum / float64(len(kbs))
}

// termCounts returns the distinct terms in first-seen order with their counts.
func termCounts(tokens []string) ([]string, []int) {
	idx := make(map[string]int, len(tokens))
	var terms []string
	var counts []int
	for _, t := range tokens {
		if i, ok := idx[t]; ok {
			counts[i]++
			continue
		}
		idx[t] = len(terms)
		terms = append(terms, t)
		counts = append(counts, 1)
	}
	return terms, counts
}

func kbIDs(kbs []*service.KnowledgeBase) []service.ID {
	ids := make([]service.ID, len(kbs))
	for i, kb := range kbs {
		ids[i] = kb.ID
	}
	return ids
}

func isZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}
