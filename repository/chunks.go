package repository

import (
	"context"
	"fmt"
	"strings"

	"github.com/pgvector/pgvector-go"
	"gorm.io/gorm/clause"

	"github.com/ragent-go/ragent/service"
)

var lockForUpdate = clause.Locking{Strength: "UPDATE"}

// ReplaceChunks swaps a document's chunks for those of a new generation and
// marks it ready, in one transaction: searches see the old set or the new
// one, never a mix or nothing. It returns service.ErrNotFound if the
// document was deleted or moved to another generation meanwhile (the result
// is stale and dropped). A repeated delivery of the same generation replaces
// the same rows, and the unique key (document, generation, ordinal) stops
// any duplicate.
func (s *Store) ReplaceChunks(ctx context.Context, docID service.ID, generation int, chunks []service.Chunk) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		var row documentRow
		if err := tx.db.Clauses(lockForUpdate).Take(&row, int64(docID)).Error; err != nil {
			return translate(err)
		}
		if row.Generation != generation {
			return fmt.Errorf("%w: document %d is at generation %d, not %d", service.ErrNotFound, docID, row.Generation, generation)
		}
		if err := tx.removeChunks(row.ID, row.KbID); err != nil {
			return err
		}
		var termTotal int64
		for i := range chunks {
			c := &chunks[i]
			if err := tx.db.Exec(`INSERT INTO chunks (id, document_id, kb_id, generation, ordinal, content, section,
				token_count, term_count, embedding, embedding_dim) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				int64(c.ID), row.ID, row.KbID, generation, c.Ordinal, c.Content, c.Section, c.TokenCount, c.TermCount,
				pgvector.NewHalfVector(c.Embedding), len(c.Embedding)).Error; err != nil {
				return translate(err)
			}
			if err := tx.insertTerms(int64(c.ID), row.KbID, c.TermCount, c.Terms); err != nil {
				return err
			}
			termTotal += int64(c.TermCount)
		}
		if err := tx.db.Exec(`UPDATE knowledge_bases SET chunk_total = chunk_total + ?, term_total = term_total + ?
			WHERE id = ?`, len(chunks), termTotal, row.KbID).Error; err != nil {
			return translate(err)
		}
		if err := tx.db.Exec(`UPDATE documents SET status = 'ready', error = '', chunk_count = ?,
			updated_at = now() WHERE id = ?`, len(chunks), row.ID).Error; err != nil {
			return translate(err)
		}
		return tx.documentEvent(row.ID)
	})
}

// insertTerms writes a chunk's postings in multi-row statements.
func (s *Store) insertTerms(chunkID, kbID int64, dl int, terms map[string]int) error {
	const batch = 500
	var (
		sb   strings.Builder
		args []any
		n    int
	)
	flush := func() error {
		if n == 0 {
			return nil
		}
		err := s.db.Exec("INSERT INTO chunk_terms (term, kb_id, chunk_id, tf, dl) VALUES "+sb.String(), args...).Error
		sb.Reset()
		args, n = args[:0], 0
		return translate(err)
	}
	for term, tf := range terms {
		if n > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString("(?,?,?,?,?)")
		args = append(args, term, kbID, chunkID, tf, dl)
		if n++; n == batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// removeChunks deletes every chunk of a document (any generation) and takes
// their share out of the knowledge base's BM25 statistics.
func (s *Store) removeChunks(docID, kbID int64) error {
	var gone struct {
		N     int64
		Terms int64
	}
	if err := s.db.Raw(`WITH d AS (DELETE FROM chunks WHERE document_id = ? RETURNING term_count)
		SELECT count(*) AS n, coalesce(sum(term_count), 0) AS terms FROM d`, docID).Scan(&gone).Error; err != nil {
		return translate(err)
	}
	if gone.N == 0 {
		return nil
	}
	return translate(s.db.Exec(`UPDATE knowledge_bases SET chunk_total = greatest(chunk_total - ?, 0),
		term_total = greatest(term_total - ?, 0) WHERE id = ?`, gone.N, gone.Terms, kbID).Error)
}

// DocumentChunks returns a document's chunks in order.
func (s *Store) DocumentChunks(ctx context.Context, docID service.ID, afterOrdinal, limit int) ([]service.Chunk, error) {
	var rows []struct {
		ID, DocumentID, KbID int64
		Generation, Ordinal  int
		Content, Section     string
		TokenCount           int
	}
	if err := s.conn(ctx).Raw(`SELECT id, document_id, kb_id, generation, ordinal, content, section, token_count
		FROM chunks WHERE document_id = ? AND ordinal > ? ORDER BY ordinal LIMIT ?`,
		int64(docID), afterOrdinal, limit).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.Chunk, len(rows))
	for i, r := range rows {
		out[i] = service.Chunk{ID: service.ID(r.ID), DocumentID: service.ID(r.DocumentID), KnowledgeBaseID: service.ID(r.KbID),
			Generation: r.Generation, Ordinal: r.Ordinal, Content: r.Content, Section: r.Section, TokenCount: r.TokenCount}
	}
	return out, nil
}
