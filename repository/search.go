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

// VectorSearch ranks chunks by cosine similarity through the HNSW index of
// the vector's dimension, among the chunks of the vector's embedding space
// (q.Space): two models of one dimension share the index, never results. Iterative scans keep the index searching until
// enough rows pass the knowledge-base filter, so a filter on a small
// knowledge base still returns Limit rows.
func (s *Store) VectorSearch(ctx context.Context, q service.VectorQuery) ([]service.SearchResult, error) {
	if len(q.Vector) == 0 || len(q.KnowledgeBaseIDs) == 0 {
		return nil, nil
	}
	ef := q.Candidates()
	dim := strconv.Itoa(len(q.Vector))
	// The dimension is an integer we format ourselves; the expression must
	// match the partial index's exactly for the planner to use it.
	sql := `SELECT c.id AS chunk_id, c.document_id, d.name AS document_name, c.kb_id, c.content, c.section, 1 - v.distance AS score
		FROM (SELECT id, embedding::halfvec(` + dim + `) <=> ?::halfvec(` + dim + `) AS distance FROM chunks
		      WHERE embedding_dim = ` + dim + ` AND kb_id = ANY(?) AND embedding_space = ? AND enabled
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
	return convert(rows, searchRow.result), nil
}
