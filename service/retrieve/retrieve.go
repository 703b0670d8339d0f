// Package retrieve is hybrid retrieval: BM25 keyword search and vector search
// run side by side, fused with weighted Reciprocal Rank Fusion or a convex
// combination of their normalized scores, optionally reranked, then gated by
// a minimum score. Vector search runs in each knowledge base's own
// embedding space; one whose space this instance cannot embed is searched by
// keyword only, and the result says so.
package retrieve

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// Store reads knowledge bases and runs the two searches.
type Store interface {
	// KnowledgeBaseSettings returns the live knowledge bases among ids;
	// their DocumentCount is not needed and may be 0.
	KnowledgeBaseSettings(ctx context.Context, ids []service.ID) ([]*service.KnowledgeBase, error)
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
	// MinRerankScore, when not nil, drops results the reranker scores
	// below it. Nil keeps every reranked result: a reranker's scale is its
	// own, and some score relevant passages below zero.
	MinRerankScore *float64
	// RerankTop is how many fused results are reranked, at least the
	// query's TopK; default 20.
	RerankTop int
	MaxTopK   int          // default 50
	Logger    *slog.Logger // nil discards
	// Fusion merges the two lists of a hybrid search; default FusionRRF.
	Fusion Fusion
	// Tracer makes a span per search and per step (keyword, vector,
	// rerank); nil makes none.
	Tracer trace.Tracer
}

// DefaultK1 and DefaultB are BM25's parameters when Config leaves them 0
// (Lucene's defaults); an OpenSearch index is created with the same.
const (
	DefaultK1 = 0.9
	DefaultB  = 0.4
)

func (c *Config) defaults() {
	c.K1 = cmp.Or(c.K1, DefaultK1)
	c.B = cmp.Or(c.B, DefaultB)
	c.Candidates = cmp.Or(c.Candidates, 50)
	c.RRFK = cmp.Or(c.RRFK, 60)
	c.RerankTop = cmp.Or(c.RerankTop, 20)
	c.MaxTopK = cmp.Or(c.MaxTopK, 50)
	c.Fusion = cmp.Or(c.Fusion, FusionRRF)
}

// Embedders returns the embedder of queries in an embedding space, or nil
// when this instance cannot embed queries there (the model is not served
// any more): such knowledge bases are searched by keyword only.
type Embedders func(space service.EmbeddingSpace) service.Embedder

// Searcher answers search queries.
type Searcher struct {
	store     Store
	access    *service.Access
	embedders Embedders
	reranker  Reranker // may be nil
	cfg       Config
	log       *slog.Logger
	tracer    trace.Tracer
}

// New returns a Searcher; access decides which knowledge bases a caller
// searches, embedders embeds the query in each knowledge base's own
// embedding space. reranker may be nil.
func New(store Store, access *service.Access, embedders Embedders, reranker Reranker, cfg Config) *Searcher {
	cfg.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tracer := tracerOr(cfg.Tracer)
	return &Searcher{store: store, access: access, embedders: embedders, reranker: tracedReranker(reranker, tracer), cfg: cfg, log: cfg.Logger, tracer: tracer}
}

// Query is a search request.
type Query struct {
	Text             string             `json:"query"`
	KnowledgeBaseIDs []service.ID       `json:"knowledgeBaseIds"`
	TopK             int                `json:"topK"`
	Mode             service.SearchMode `json:"mode"`
}

// Result is what a search found, and which knowledge bases it could search
// by keyword only.
type Result struct {
	Results     []service.SearchResult
	KeywordOnly []KeywordOnly
	// Searched are the knowledge bases the query ran over (the named ones,
	// or every one p may read), set once they are resolved, failures after
	// that included: chat records them per turn.
	Searched []service.ID
}

// KeywordOnly names a knowledge base whose vectors could not be searched
// because this instance cannot embed the query in their space.
type KeywordOnly struct {
	KnowledgeBaseID service.ID `json:"knowledgeBaseId"`
	Reason          string     `json:"reason"`
}

// Search returns the TopK most relevant chunks of the chosen knowledge bases
// (every one p may read when none are named) that pass the relevance gate.
// A named knowledge base p may not read is service.ErrNotFound, exactly as
// one that does not exist: never quietly left out of the results.
func (s *Searcher) Search(ctx context.Context, p service.Principal, q Query) ([]service.SearchResult, error) {
	r, err := s.Run(ctx, p, q)
	return r.Results, err
}

// Run is Search, also saying which knowledge bases it searched, and which
// of them by keyword only.
func (s *Searcher) Run(ctx context.Context, p service.Principal, q Query) (Result, error) {
	var r Result
	err := s.search(ctx, p, q, &r)
	return r, err
}

func (s *Searcher) search(ctx context.Context, p service.Principal, q Query, r *Result) error {
	q.Text = strings.TrimSpace(q.Text)
	if q.Text == "" {
		return service.Errorf(service.ErrInvalid, "query must not be empty")
	}
	if utf8.RuneCountInString(q.Text) > service.MaxQuestionRunes {
		return service.Errorf(service.ErrInvalid, "query must be at most %d characters", service.MaxQuestionRunes)
	}
	if q.Mode == "" {
		q.Mode = service.SearchHybrid
	}
	// The search's span: its steps (keyword, vector, rerank) record their
	// own errors.
	ctx, span := s.tracer.Start(ctx, "retrieve.search", trace.WithAttributes(attribute.String("ragent.search.mode", string(q.Mode))))
	defer span.End()
	if !q.Mode.Valid() {
		return service.Errorf(service.ErrInvalid, "mode must be hybrid, keyword or vector")
	}
	if q.TopK == 0 {
		q.TopK = 5
	}
	if q.TopK < 1 || q.TopK > s.cfg.MaxTopK {
		return service.Errorf(service.ErrInvalid, "topK must be between 1 and %d", s.cfg.MaxTopK)
	}
	kbs, err := s.knowledgeBases(ctx, p, q.KnowledgeBaseIDs)
	if err != nil {
		return err
	}
	r.Searched = make([]service.ID, len(kbs))
	for i, kb := range kbs {
		r.Searched[i] = kb.ID
	}
	if len(kbs) == 0 {
		return nil
	}

	var keyword, vector []service.SearchResult
	if q.Mode != service.SearchVector {
		if keyword, err = s.keyword(ctx, q.Text, kbs); err != nil {
			return err
		}
	}
	var keywordOnly []KeywordOnly
	if q.Mode != service.SearchKeyword {
		if vector, keywordOnly, err = s.vector(ctx, q.Text, kbs); err != nil {
			return err
		}
	}

	var results []service.SearchResult
	switch q.Mode {
	case service.SearchKeyword:
		results = keyword
	case service.SearchVector:
		results = gateVector(vector, s.cfg.MinVectorScore)
	case service.SearchHybrid:
		vector = gateVector(vector, s.cfg.MinVectorScore)
		if s.cfg.Fusion == FusionConvex {
			results = FuseScores(keyword, vector, vectorWeight(kbs))
		} else {
			results = Fuse(keyword, vector, vectorWeight(kbs), s.cfg.RRFK)
		}
	}
	if s.reranker != nil && len(results) > 0 {
		if results, err = s.rerank(ctx, q.Text, results, max(s.cfg.RerankTop, q.TopK)); err != nil {
			return err
		}
	}
	if len(results) > q.TopK {
		results = results[:q.TopK]
	}
	r.Results, r.KeywordOnly = results, keywordOnly
	return nil
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
		if err := s.access.CheckReadable(ctx, p, ids); err != nil {
			return nil, err
		}
		want = ids
	}
	kbs, err := s.store.KnowledgeBaseSettings(ctx, want)
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

func (s *Searcher) keyword(ctx context.Context, query string, kbs []*service.KnowledgeBase) (_ []service.SearchResult, err error) {
	ctx, end := s.step(ctx, "retrieve.keyword")
	defer func() { end(err) }()
	terms := TermCounts(text.Tokenize(query))
	if len(terms) == 0 {
		return nil, nil
	}
	return s.store.KeywordSearch(ctx, service.KeywordQuery{
		KnowledgeBaseIDs: kbIDs(kbs), Terms: terms, K1: s.cfg.K1, B: s.cfg.B, Limit: s.cfg.Candidates,
	})
}

// vector searches each knowledge base in its own embedding space: the query
// is embedded once per space, and only chunks of that space are compared
// with it. Knowledge bases whose space this instance cannot embed are left
// to keyword search, and the result and a log line say so. The lists of
// several spaces are merged by similarity.
func (s *Searcher) vector(ctx context.Context, query string, kbs []*service.KnowledgeBase) (_ []service.SearchResult, _ []KeywordOnly, err error) {
	ctx, end := s.step(ctx, "retrieve.vector")
	defer func() { end(err) }()
	bySpace := map[string][]service.ID{}
	spaces := map[string]service.EmbeddingSpace{}
	var order []string
	var keywordOnly []KeywordOnly
	for _, kb := range kbs {
		sp := kb.Space()
		key := sp.Key()
		if _, ok := spaces[key]; !ok {
			spaces[key] = sp
			order = append(order, key)
		}
		bySpace[key] = append(bySpace[key], kb.ID)
	}
	var out []service.SearchResult
	for _, key := range order {
		sp := spaces[key]
		emb := s.embedders(sp)
		if emb == nil {
			for _, id := range bySpace[key] {
				keywordOnly = append(keywordOnly, KeywordOnly{KnowledgeBaseID: id,
					Reason: fmt.Sprintf("its vectors are in %s, which this instance does not embed", sp)})
				s.log.WarnContext(ctx, "knowledge base embedded with a model this instance does not run; searched by keyword only",
					"knowledge_base", id, "space", sp.String())
			}
			continue
		}
		vecs, err := emb.Embed(ctx, service.EmbedQuery, []string{query})
		if err != nil {
			return nil, nil, fmt.Errorf("embed query: %w", err)
		}
		if len(vecs) != 1 || isZero(vecs[0]) {
			continue
		}
		found, err := s.store.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: bySpace[key], Space: key, Vector: vecs[0], Limit: s.cfg.Candidates})
		if err != nil {
			return nil, nil, err
		}
		out = append(out, found...)
	}
	if len(order) > 1 {
		sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
		out = out[:min(len(out), s.cfg.Candidates)]
	}
	return out, keywordOnly, nil
}

// rerank reorders the first top results by the reranker's scores; a
// result the reranker left unscored (-Inf) or scored below the minimum is
// dropped.
func (s *Searcher) rerank(ctx context.Context, query string, results []service.SearchResult, top int) ([]service.SearchResult, error) {
	n := min(len(results), top)
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
		if !math.IsInf(scores[i], -1) && (s.cfg.MinRerankScore == nil || scores[i] >= *s.cfg.MinRerankScore) {
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
	var f fused
	add := func(list []service.SearchResult, weight float64) {
		if weight <= 0 {
			return
		}
		for i, r := range list {
			f.add(r, weight/(k+float64(i+1)))
		}
	}
	add(keyword, 1)
	add(vector, w)
	return f.ranked()
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

// TermCounts returns the distinct terms in first-seen order with their
// counts: the terms of a KeywordQuery.
func TermCounts(tokens []string) []service.TermCount {
	idx := make(map[string]int, len(tokens))
	var terms []service.TermCount
	for _, t := range tokens {
		if i, ok := idx[t]; ok {
			terms[i].Count++
			continue
		}
		idx[t] = len(terms)
		terms = append(terms, service.TermCount{Term: t, Count: 1})
	}
	return terms
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
