package repository

import (
	"context"
	"sort"
	"strconv"

	"github.com/pgvector/pgvector-go"

	"github.com/ragent-go/ragent/service"
)

// searchRow is one ranked chunk as the search queries return it.
type searchRow struct {
	ChunkID      int64
	DocumentID   int64
	DocumentName string
	KbID         int64
	Content      string
	Section      string
	Score        float64
}

func (r searchRow) result() service.SearchResult {
	return service.SearchResult{
		ChunkID: service.ID(r.ChunkID), DocumentID: service.ID(r.DocumentID), DocumentName: r.DocumentName,
		KnowledgeBaseID: service.ID(r.KbID), Content: r.Content, Section: r.Section, Score: r.Score,
	}
}

// keywordSQL is Okapi BM25 with Lucene's idf, ln(1 + (N - df + 0.5)/(df + 0.5)),
// over the postings of the query terms in the chosen knowledge bases. N and
// the average chunk length come from the knowledge bases' statistics; df is
// counted over the same postings by a window function, so one index scan
// feeds both.
const keywordSQL = `
WITH q AS (
	SELECT * FROM unnest(?::text[], ?::int[]) AS q(term, qtf)
), st AS (
	SELECT coalesce(sum(chunk_total), 0)::float8 AS n,
	       coalesce(sum(term_total), 0)::float8 / greatest(coalesce(sum(chunk_total), 0), 1) AS avgdl
	FROM knowledge_bases WHERE id = ANY(?) AND deleted_at IS NULL
), postings AS (
	SELECT ct.term, ct.chunk_id, ct.tf, ct.dl, count(*) OVER (PARTITION BY ct.term)::float8 AS df
	FROM chunk_terms ct WHERE ct.term = ANY(?) AND ct.kb_id = ANY(?)
), scored AS (
	SELECT p.chunk_id,
	       sum(q.qtf * ln(1 + (st.n - p.df + 0.5) / (p.df + 0.5))
	           * p.tf * (?::float8 + 1) / (p.tf + ?::float8 * (1 - ?::float8 + ?::float8 * p.dl / greatest(st.avgdl, 1)))) AS score
	FROM postings p JOIN q ON q.term = p.term CROSS JOIN st
	GROUP BY p.chunk_id ORDER BY score DESC, p.chunk_id LIMIT ?
)
SELECT s.chunk_id, c.document_id, d.name AS document_name, c.kb_id, c.content, c.section, s.score
FROM scored s JOIN chunks c ON c.id = s.chunk_id JOIN documents d ON d.id = c.document_id
ORDER BY s.score DESC, s.chunk_id`

// KeywordSearch ranks chunks by BM25.
func (s *Store) KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchResult, error) {
	if len(q.Terms) == 0 || len(q.KnowledgeBaseIDs) == 0 {
		return nil, nil
	}
	kbs, terms := idArray(q.KnowledgeBaseIDs), textArray(q.Terms)
	var rows []searchRow
	if err := s.conn(ctx).Raw(keywordSQL, terms, countArray(q.Counts), kbs, terms, kbs, q.K1, q.K1, q.B, q.B, q.Limit).
		Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.SearchResult, len(rows))
	for i, r := range rows {
		out[i] = r.result()
	}
	return out, nil
}

// VectorSearch ranks chunks by cosine similarity through the HNSW index of
// the vector's dimension, among the chunks of the vector's embedding space
// (q.Space): two models of one dimension share the index, never results. Iterative scans keep the index searching until
// enough rows pass the knowledge-base filter, so a filter on a small
// knowledge base still returns Limit rows.
func (s *Store) VectorSearch(ctx context.Context, q service.VectorQuery) ([]service.SearchResult, error) {
	if len(q.Vector) == 0 || len(q.KnowledgeBaseIDs) == 0 {
		return nil, nil
	}
	ef := q.EfSearch
	if ef <= 0 {
		ef = 100
	}
	ef = max(ef, q.Limit)
	dim := strconv.Itoa(len(q.Vector))
	// The dimension is an integer we format ourselves; the expression must
	// match the partial index's exactly for the planner to use it.
	sql := `SELECT c.id AS chunk_id, c.document_id, d.name AS document_name, c.kb_id, c.content, c.section, 1 - v.distance AS score
		FROM (SELECT id, embedding::halfvec(` + dim + `) <=> ?::halfvec(` + dim + `) AS distance FROM chunks
		      WHERE embedding_dim = ` + dim + ` AND kb_id = ANY(?) AND embedding_space = ?
		      ORDER BY embedding::halfvec(` + dim + `) <=> ?::halfvec(` + dim + `) LIMIT ?) v
		JOIN chunks c ON c.id = v.id JOIN documents d ON d.id = c.document_id`
	vec := pgvector.NewHalfVector(q.Vector)
	var rows []searchRow
	err := s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SET LOCAL hnsw.iterative_scan = relaxed_order").Error; err != nil {
			return translate(err)
		}
		if err := tx.db.Exec("SET LOCAL hnsw.ef_search = " + strconv.Itoa(ef)).Error; err != nil {
			return translate(err)
		}
		return translate(tx.db.Raw(sql, vec, idArray(q.KnowledgeBaseIDs), q.Space, vec, q.Limit).Scan(&rows).Error)
	})
	if err != nil {
		return nil, err
	}
	// relaxed_order may return rows slightly out of order.
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Score > rows[j].Score })
	out := make([]service.SearchResult, len(rows))
	for i, r := range rows {
		out[i] = r.result()
	}
	return out, nil
}
