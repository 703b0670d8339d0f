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
		if err := tx.insertChunks(row.ID, row.KbID, generation, chunks); err != nil {
			return err
		}
		if err := tx.indexChunks(row.KbID, chunks); err != nil {
			return err
		}
		return translate(tx.db.Exec(`UPDATE documents SET status = 'ready', error = '', chunk_count = ?,
			updated_at = now() WHERE id = ?`, len(chunks), row.ID).Error)
	})
}

// chunkBatch is the number of chunks per multi-row INSERT: 11 parameters
// each, well under Postgres's 65535 per statement.
const chunkBatch = 200

// insertChunks writes chunks in multi-row statements.
func (s *Store) insertChunks(docID, kbID int64, generation int, chunks []service.Chunk) error {
	for start := 0; start < len(chunks); start += chunkBatch {
		part := chunks[start:min(start+chunkBatch, len(chunks))]
		var sb strings.Builder
		args := make([]any, 0, 11*len(part))
		for i := range part {
			c := &part[i]
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("(?,?,?,?,?,?,?,?,?,?,?)")
			args = append(args, int64(c.ID), docID, kbID, generation, c.Ordinal, c.Content, c.Section, c.TokenCount,
				c.TermCount, pgvector.NewHalfVector(c.Embedding), len(c.Embedding))
		}
		if err := s.db.Exec(`INSERT INTO chunks (id, document_id, kb_id, generation, ordinal, content, section,
			token_count, term_count, embedding, embedding_dim) VALUES `+sb.String(), args...).Error; err != nil {
			return translate(err)
		}
	}
	return nil
}

// removeChunks deletes every chunk of a document (any generation) and takes
// them out of the keyword index and its statistics.
func (s *Store) removeChunks(docID, kbID int64) error {
	var gone []struct {
		ID        int64
		TermCount int64
	}
	if err := s.db.Raw(`DELETE FROM chunks WHERE document_id = ? RETURNING id, term_count`, docID).
		Scan(&gone).Error; err != nil {
		return translate(err)
	}
	if len(gone) == 0 {
		return nil
	}
	ids := make(intArray, len(gone))
	var terms int64
	for i, g := range gone {
		ids[i], terms = g.ID, terms+g.TermCount
	}
	return s.unindexChunks(kbID, ids, int64(len(gone)), terms)
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
