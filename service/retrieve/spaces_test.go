package retrieve

import (
	"context"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// spaceStore holds knowledge bases in several embedding spaces and records
// the vector queries it gets.
type spaceStore struct {
	kbs     []*service.KnowledgeBase
	vectors []service.VectorQuery
}

func (s *spaceStore) KnowledgeBaseGrants(_ context.Context, _ service.ID, ids []service.ID) ([]service.KBGrant, error) {
	var out []service.KBGrant
	for _, kb := range s.kbs {
		out = append(out, service.KBGrant{KnowledgeBaseID: kb.ID, Visibility: service.VisibilityPrivate})
	}
	return out, nil
}

func (s *spaceStore) KnowledgeBaseSettings(context.Context, []service.ID) ([]*service.KnowledgeBase, error) {
	return s.kbs, nil
}

func (s *spaceStore) KeywordSearch(context.Context, service.KeywordQuery) ([]service.SearchResult, error) {
	return nil, nil
}

func (s *spaceStore) VectorSearch(_ context.Context, q service.VectorQuery) ([]service.SearchResult, error) {
	s.vectors = append(s.vectors, q)
	return []service.SearchResult{{ChunkID: q.KnowledgeBaseIDs[0] * 10, KnowledgeBaseID: q.KnowledgeBaseIDs[0], Score: 0.9}}, nil
}

// kindEmbedder records the kinds it is asked to embed.
type kindEmbedder struct {
	model string
	kinds []service.EmbedKind
}

func (e *kindEmbedder) Embed(_ context.Context, kind service.EmbedKind, texts []string) ([][]float32, error) {
	e.kinds = append(e.kinds, kind)
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{1, 0}
	}
	return out, nil
}
func (e *kindEmbedder) Model() string { return e.model }
func (e *kindEmbedder) Dim() int      { return 2 }

// Each knowledge base is searched in its own embedding space, with a query
// embedding of that space; one whose space has no embedder here is searched
// by keyword only, and the result says so.
func TestVectorSearchPerSpace(t *testing.T) {
	a := service.EmbeddingSpace{Model: "a", Dim: 2}
	b := service.EmbeddingSpace{Model: "b", Dim: 2, QueryPrefix: "query: "}
	gone := service.EmbeddingSpace{Model: "gone", Dim: 2}
	kb := func(id service.ID, sp service.EmbeddingSpace) *service.KnowledgeBase {
		return &service.KnowledgeBase{ID: id, EmbeddingModel: sp.Model, EmbeddingDim: sp.Dim, EmbeddingQueryPrefix: sp.QueryPrefix, VectorWeight: 1}
	}
	store := &spaceStore{kbs: []*service.KnowledgeBase{kb(1, a), kb(2, b), kb(3, gone), kb(4, a)}}
	ea, eb := &kindEmbedder{model: "a"}, &kindEmbedder{model: "b"}
	embedders := func(sp service.EmbeddingSpace) service.Embedder {
		switch sp {
		case a:
			return ea
		case b:
			return eb
		}
		return nil
	}
	s := New(store, service.NewAccess(store), embedders, nil, Config{})
	res, err := s.Run(context.Background(), service.SystemPrincipal(), Query{Text: "vpn", Mode: service.SearchVector})
	if err != nil {
		t.Fatal(err)
	}
	if len(store.vectors) != 2 {
		t.Fatalf("%d vector queries, want one per available space", len(store.vectors))
	}
	bySpace := map[string][]service.ID{}
	for _, q := range store.vectors {
		bySpace[q.Space] = q.KnowledgeBaseIDs
	}
	if ids := bySpace[a.Key()]; len(ids) != 2 || ids[0] != 1 || ids[1] != 4 {
		t.Fatalf("space a searched %v, want [1 4]", ids)
	}
	if ids := bySpace[b.Key()]; len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("space b searched %v, want [2]", ids)
	}
	if len(ea.kinds) != 1 || ea.kinds[0] != service.EmbedQuery || len(eb.kinds) != 1 || eb.kinds[0] != service.EmbedQuery {
		t.Fatalf("query embeddings: a %v, b %v; want one EmbedQuery each", ea.kinds, eb.kinds)
	}
	if len(res.KeywordOnly) != 1 || res.KeywordOnly[0].KnowledgeBaseID != 3 || !strings.Contains(res.KeywordOnly[0].Reason, "gone") {
		t.Fatalf("keyword-only: %+v", res.KeywordOnly)
	}
	if len(res.Results) != 2 {
		t.Fatalf("results %+v", res.Results)
	}
}
