package opensearch

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// KeywordSearch ranks the chunks of q's knowledge bases by BM25 over q's
// terms and returns the top q.Limit; the caller reads the rest from
// Postgres (see repository.Store.ChunkResults).
// The knowledge-base filter is part of the query, so other knowledge bases'
// chunks are never candidates. q.K1 and q.B are the index's (set when it
// was created). Ties keep chunk id order, as in Postgres.
func (c *Client) KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchHit, error) {
	if len(q.Terms) == 0 || len(q.KnowledgeBaseIDs) == 0 || q.Limit <= 0 {
		return nil, nil
	}
	should := make([]any, len(q.Terms))
	for i, t := range q.Terms {
		should[i] = map[string]any{"term": map[string]any{fieldTerms: map[string]any{"value": t.Term, "boost": max(t.Count, 1)}}}
	}
	body := map[string]any{
		"size":             q.Limit,
		"_source":          false,
		"track_total_hits": false,
		"query": map[string]any{"bool": map[string]any{
			"filter":               []any{map[string]any{"terms": map[string]any{fieldKB: q.KnowledgeBaseIDs}}},
			"should":               should,
			"minimum_should_match": 1,
		}},
	}
	results, err := c.search(ctx, body)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(results, func(i, j int) bool {
		if results[i].Score != results[j].Score {
			return results[i].Score > results[j].Score
		}
		return results[i].ChunkID < results[j].ChunkID
	})
	return results, nil
}

// VectorSearch returns the q.Limit chunks of q's knowledge bases nearest to
// q.Vector in q.Space by cosine similarity, through
// the k-NN plugin's Lucene engine with the knowledge-base filter inside the
// search. The engine scores (1 + cos) / 2; Score is the cosine, as
// Postgres returns it, so the same relevance gate applies.
func (c *Client) VectorSearch(ctx context.Context, q service.VectorQuery) ([]service.SearchHit, error) {
	if len(q.Vector) == 0 || len(q.KnowledgeBaseIDs) == 0 || q.Limit <= 0 || q.Space == "" {
		return nil, nil
	}
	body := map[string]any{
		"size":             q.Limit,
		"_source":          false,
		"track_total_hits": false,
		"query": map[string]any{"knn": map[string]any{vectorField(q.Space): map[string]any{
			"vector": q.Vector,
			"k":      q.Candidates(),
			"filter": map[string]any{"terms": map[string]any{fieldKB: q.KnowledgeBaseIDs}},
		}}},
	}
	results, err := c.search(ctx, body)
	if isStatus(err, http.StatusBadRequest) && strings.Contains(err.Error(), vectorField(q.Space)) {
		// No chunk of this space was written yet: its field does not
		// exist, and nothing can match.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for i := range results {
		results[i].Score = 2*results[i].Score - 1
	}
	if len(results) > q.Limit {
		results = results[:q.Limit]
	}
	return results, nil
}

// search runs a query on the alias and returns its hits, with the
// document and generation each chunk was indexed under (doc values, not
// the source).
func (c *Client) search(ctx context.Context, body map[string]any) ([]service.SearchHit, error) {
	body["docvalue_fields"] = []string{fieldDocument, fieldGeneration}
	var out struct {
		Hits struct {
			Hits []struct {
				ID     string  `json:"_id"`
				Score  float64 `json:"_score"`
				Fields struct {
					Document   []int64 `json:"document_id"`
					Generation []int   `json:"generation"`
				} `json:"fields"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := c.do(ctx, http.MethodPost, "/"+c.Alias()+"/_search", body, &out); err != nil {
		if isStatus(err, http.StatusNotFound) {
			// The cluster lost the index (or is a new one): an outage of
			// search, not a bug; ragent reindex-search rebuilds it.
			return nil, fmt.Errorf("%w: index %s is missing (run ragent reindex-search): %w", service.ErrSearchUnavailable, c.Alias(), err)
		}
		return nil, err
	}
	results := make([]service.SearchHit, 0, len(out.Hits.Hits))
	for _, h := range out.Hits.Hits {
		id, err := service.ParseID(h.ID)
		if err != nil {
			continue
		}
		hit := service.SearchHit{ChunkID: id, Score: h.Score}
		if f := h.Fields; len(f.Document) == 1 && len(f.Generation) == 1 {
			hit.DocumentID, hit.Generation = service.ID(f.Document[0]), f.Generation[0]
		}
		results = append(results, hit)
	}
	return results, nil
}
