package repository

import (
	"context"
	"errors"
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
//
// space is the key of the embedding space the chunks' vectors are in. When
// it is the knowledge base's recorded space (and it is not moving) they
// become the chunks' vectors; when it is the space the knowledge base is
// being re-embedded into, they are stored as the next vectors (found by keyword until the
// switch) and the document counts as re-embedded. Any other space is
// ErrSpaceChanged: the knowledge base moved on while the chunks were
// embedded, and the caller should embed them again. The space is checked
// again under the knowledge base's row lock that the update of its BM25
// statistics takes, so a switch (FinishReembed, which holds that lock)
// either waits for this transaction and sees its chunks or commits first
// and makes it roll back.
func (s *Store) ReplaceChunks(ctx context.Context, docID service.ID, generation int, space string, chunks []service.Chunk) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		var row documentRow
		if err := tx.db.Clauses(lockForUpdate).Take(&row, int64(docID)).Error; err != nil {
			return translate(err)
		}
		if row.Generation != generation {
			return fmt.Errorf("%w: document %d is at generation %d, not %d", service.ErrNotFound, docID, row.Generation, generation)
		}
		next, err := tx.spaceRole(row.KbID, space, "")
		if err != nil {
			return err
		}
		if err := tx.removeChunks(row.ID, row.KbID); err != nil {
			return err
		}
		var termTotal int64
		for i := range chunks {
			c := &chunks[i]
			vec, dim, cur, nextVec := any(pgvector.NewHalfVector(c.Embedding)), len(c.Embedding), space, any(nil)
			if next {
				vec, dim, cur, nextVec = nil, 0, "", pgvector.NewHalfVector(c.Embedding)
			}
			if err := tx.db.Exec(`INSERT INTO chunks (id, document_id, kb_id, generation, ordinal, content, section,
				token_count, term_count, embedding, embedding_dim, embedding_space, next_embedding)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				int64(c.ID), row.ID, row.KbID, generation, c.Ordinal, c.Content, c.Section, c.TokenCount, c.TermCount,
				vec, dim, cur, nextVec).Error; err != nil {
				return translate(err)
			}
			if err := tx.insertTerms(int64(c.ID), row.KbID, c.TermCount, c.Terms); err != nil {
				return err
			}
			termTotal += int64(c.TermCount)
		}
		var kb kbSpaces
		if err := tx.db.Raw(`UPDATE knowledge_bases SET chunk_total = chunk_total + ?, term_total = term_total + ?
			WHERE id = ? RETURNING embedding_space, reembed_space`, len(chunks), termTotal, row.KbID).Scan(&kb).Error; err != nil {
			return translate(err)
		}
		if now, err := kb.role(row.KbID, space); err != nil || now != next {
			return errors.Join(err, fmt.Errorf("%w: knowledge base %d switched spaces meanwhile", ErrSpaceChanged, row.KbID))
		}
		reembedded := ""
		if next {
			reembedded = space
		}
		return translate(tx.db.Exec(`UPDATE documents SET status = 'ready', error = '', chunk_count = ?,
			reembedded_space = ?, updated_at = now() WHERE id = ?`, len(chunks), reembedded, row.ID).Error)
	})
}

// ErrSpaceChanged says a knowledge base is neither in nor moving to the
// embedding space some vectors were made in: they were embedded for a
// knowledge base that has moved on since, and must be embedded again.
var ErrSpaceChanged = errors.New("the knowledge base's embedding space changed")

// kbSpaces is a knowledge base's recorded space and re-embedding target.
type kbSpaces struct {
	EmbeddingSpace string
	ReembedSpace   *string
}

// role says whether space is the recorded space (false) or the target
// (true). While a knowledge base moves, only the target takes new vectors:
// a document written in the recorded space then would need re-embedding
// after its message was spent, and the move could never finish.
func (kb kbSpaces) role(kbID int64, space string) (next bool, err error) {
	switch {
	case kb.ReembedSpace != nil && *kb.ReembedSpace == space:
		return true, nil
	case kb.ReembedSpace == nil && kb.EmbeddingSpace == space:
		return false, nil
	}
	return false, fmt.Errorf("%w: knowledge base %d is in space %q (re-embedding into %q), the vectors in %q",
		ErrSpaceChanged, kbID, kb.EmbeddingSpace, deref(kb.ReembedSpace), space)
}

// spaceRole reads a knowledge base's role for space; lock ("" or "FOR
// SHARE") is the row lock to take.
func (s *Store) spaceRole(kbID int64, space, lock string) (next bool, err error) {
	var kb kbSpaces
	if err := s.db.Raw(`SELECT embedding_space, reembed_space FROM knowledge_bases WHERE id = ? `+lock, kbID).
		Scan(&kb).Error; err != nil {
		return false, translate(err)
	}
	return kb.role(kbID, space)
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
