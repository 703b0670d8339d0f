package repository

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// being re-embedded into, they are stored as the next vectors (found by
// keyword until the switch) and the document counts as re-embedded. Any
// other space is ErrSpaceChanged: the knowledge base moved on while the
// chunks were embedded, and the caller should embed them again. The space
// is read under a share lock of the knowledge base's row, so a switch
// (FinishReembed, which locks that row for update) either waits for this
// transaction and sees its chunks or commits first and is read here. Nothing
// else in this transaction writes that row, so concurrent writers' share
// locks never have to be upgraded (which would deadlock them).
func (s *Store) ReplaceChunks(ctx context.Context, docID service.ID, generation int, space string, chunks []service.Chunk) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		row, removed, reembedded, err := tx.swapChunks(docID, generation, space, chunks)
		if err != nil {
			return err
		}
		if tx.search != nil {
			// The document stays running until the search engine holds
			// the new chunks (SearchIndexed).
			return tx.searchChanged(row.ID, generation, removed, `chunk_count = ?, curated_chunks = 0, error = '', reembedded_space = ?`, len(chunks), reembedded)
		}
		return tx.chunksReady(row.ID, len(chunks), reembedded)
	})
}

// ReplaceIndexedChunks is ReplaceChunks for a search engine written in the
// commit's own path (RAGENT_SEARCH_BACKEND=opensearch), with no second hop
// through the search-index consumer: in the transaction, once the chunks
// are in Postgres, index writes them to the engine, and the document turns
// ready at the commit. visible asks index to return only once they are
// searchable: the commit removes an earlier generation's chunks, which stay
// searchable until then, so the new ones must be found from the commit on.
// vectors is false when the chunks' vectors are not their knowledge base's
// current ones (it is being re-embedded into their space). The removed
// chunks' deletion from the engine is queued as a search-index message.
//
// The transaction holds the search-rebuild lock shared: a rebuild
// (WithSearchRebuildLock) begins either before index reads where to write
// (and the write reaches the rebuilt index too) or after the commit (and
// its backfill reads these chunks).
//
// When index fails and the commit removes nothing (a first generation),
// the chunks are committed as ReplaceChunks does (the document running, the
// search-index message queued), so an engine outage holds back readiness,
// not ingestion; a permanent error (service.ErrPermanent) or a replacement
// whose new chunks are not searchable rolls back and returns the error.
func (s *Store) ReplaceIndexedChunks(ctx context.Context, docID service.ID, generation int, space string, chunks []service.Chunk,
	index func(ctx context.Context, visible, vectors bool) error) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		row, removed, reembedded, err := tx.swapChunks(docID, generation, space, chunks)
		if err != nil {
			return err
		}
		if err := tx.db.Exec("SELECT pg_advisory_xact_lock_shared(?)", searchRebuildLockKey).Error; err != nil {
			return translate(err)
		}
		if err := index(ctx, len(removed) > 0, reembedded == ""); err != nil {
			if len(removed) > 0 || errors.Is(err, service.ErrPermanent) || ctx.Err() != nil || tx.search == nil {
				return err
			}
			tx.log.WarnContext(ctx, "the search engine did not take a document's chunks; it stays running until the search-index consumer writes them",
				"document", docID, "generation", generation, "err", err)
			return tx.searchChanged(row.ID, generation, nil, `chunk_count = ?, curated_chunks = 0, error = '', reembedded_space = ?`, len(chunks), reembedded)
		}
		if len(removed) > 0 && tx.search != nil {
			if err := tx.enqueueSearch(row.ID, generation, removed, true); err != nil {
				return err
			}
			if err := tx.db.Exec(`UPDATE documents SET search_pending_since = now() WHERE id = ?`, row.ID).Error; err != nil {
				return translate(err)
			}
		}
		return tx.chunksReady(row.ID, len(chunks), reembedded)
	})
}

// searchRebuildLockKey is the advisory lock between the writers of a
// search engine's index in a commit's path (shared) and the start of a
// rebuild (exclusive).
const searchRebuildLockKey = 0x73726368 // "srch"

// WithSearchRebuildLock runs fn holding the search-rebuild lock
// exclusively: no ReplaceIndexedChunks is between its write to the engine
// and its commit meanwhile. A rebuild begins under it.
func (s *Store) WithSearchRebuildLock(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SELECT pg_advisory_xact_lock(?)", searchRebuildLockKey).Error; err != nil {
			return translate(err)
		}
		return fn(ctx)
	})
}

// swapChunks locks a document at generation, removes its chunks and writes
// chunks in their place, with the keyword index; it returns the row, the
// removed chunks' ids and the space of a re-embedding ("" when the vectors
// are the knowledge base's current ones).
func (s *Store) swapChunks(docID service.ID, generation int, space string, chunks []service.Chunk) (*documentRow, intArray, string, error) {
	var row documentRow
	if err := s.db.Clauses(lockForUpdate).Take(&row, int64(docID)).Error; err != nil {
		return nil, nil, "", translate(err)
	}
	if row.Generation != generation {
		return nil, nil, "", fmt.Errorf("%w: document %d is at generation %d, not %d", service.ErrNotFound, docID, row.Generation, generation)
	}
	next, err := s.spaceRole(row.KbID, space, "FOR SHARE")
	if err != nil {
		return nil, nil, "", err
	}
	removed, err := s.removeChunks(row.ID, row.KbID)
	if err != nil {
		return nil, nil, "", err
	}
	if err := s.insertChunks(row.ID, row.KbID, generation, space, next, chunks); err != nil {
		return nil, nil, "", err
	}
	if err := s.indexChunks(row.KbID, chunks); err != nil {
		return nil, nil, "", err
	}
	ocr := slices.ContainsFunc(chunks, func(c service.Chunk) bool { return c.OCR })
	if ocr != row.OCR {
		if err := s.db.Exec(`UPDATE documents SET ocr = ? WHERE id = ?`, ocr, row.ID).Error; err != nil {
			return nil, nil, "", translate(err)
		}
		row.OCR = ocr
	}
	reembedded := ""
	if next {
		reembedded = space
	}
	return &row, removed, reembedded, nil
}

// chunksReady marks a document ready with its new chunks, with its webhook
// events.
func (s *Store) chunksReady(docID int64, n int, reembedded string) error {
	if err := s.db.Exec(`UPDATE documents SET status = 'ready', error = '', chunk_count = ?, curated_chunks = 0,
		reembedded_space = ?, updated_at = now() WHERE id = ?`, n, reembedded, docID).Error; err != nil {
		return translate(err)
	}
	return s.documentEvent(docID)
}

// chunkBatch is the number of chunks per multi-row INSERT: 13 parameters
// each, well under Postgres's 65535 per statement.
const chunkBatch = 200

// insertChunks writes chunks in multi-row statements. Their vectors are in
// space: the chunks' vectors, or their next ones when next (the knowledge
// base is being re-embedded into space; see ReplaceChunks).
func (s *Store) insertChunks(docID, kbID int64, generation int, space string, next bool, chunks []service.Chunk) error {
	for start := 0; start < len(chunks); start += chunkBatch {
		part := chunks[start:min(start+chunkBatch, len(chunks))]
		var sb strings.Builder
		args := make([]any, 0, 13*len(part))
		for i := range part {
			c := &part[i]
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?,?)")
			vec, dim, cur, nextVec := any(pgvector.NewHalfVector(c.Embedding)), len(c.Embedding), space, any(nil)
			if next {
				vec, dim, cur, nextVec = nil, 0, "", pgvector.NewHalfVector(c.Embedding)
			}
			args = append(args, int64(c.ID), docID, kbID, generation, c.Ordinal, c.Content, c.Section, c.TokenCount,
				c.TermCount, vec, dim, cur, nextVec)
		}
		if err := s.db.Exec(`INSERT INTO chunks (id, document_id, kb_id, generation, ordinal, content, section,
			token_count, term_count, embedding, embedding_dim, embedding_space, next_embedding) VALUES `+sb.String(), args...).Error; err != nil {
			return translate(err)
		}
	}
	return nil
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

// removeChunks deletes every chunk of a document (any generation), takes
// them out of the keyword index and its statistics, and returns their ids.
func (s *Store) removeChunks(docID, kbID int64) (intArray, error) {
	var gone []struct {
		ID        int64
		TermCount int64
	}
	if err := s.db.Raw(`DELETE FROM chunks WHERE document_id = ? RETURNING id, term_count`, docID).
		Scan(&gone).Error; err != nil {
		return nil, translate(err)
	}
	if len(gone) == 0 {
		return nil, nil
	}
	ids := make(intArray, len(gone))
	var terms int64
	for i, g := range gone {
		ids[i], terms = g.ID, terms+g.TermCount
	}
	return ids, s.unindexChunks(kbID, ids, int64(len(gone)), terms)
}

// chunkRow is a chunk as the chunk routes read it (chunkColumns).
type chunkRow struct {
	ID, DocumentID, KbID int64
	Generation, Ordinal  int
	Content, Section     string
	TokenCount           int
	Enabled, Manual      bool
	Revision             int
}

const chunkColumns = `id, document_id, kb_id, generation, ordinal, content, section, token_count, enabled, manual, revision`

func (r chunkRow) chunk() service.Chunk {
	return service.Chunk{ID: service.ID(r.ID), DocumentID: service.ID(r.DocumentID), KnowledgeBaseID: service.ID(r.KbID),
		Generation: r.Generation, Ordinal: r.Ordinal, Content: r.Content, Section: r.Section, TokenCount: r.TokenCount,
		Enabled: r.Enabled, Manual: r.Manual, Revision: r.Revision}
}

// DocumentChunks returns a document's chunks in order.
func (s *Store) DocumentChunks(ctx context.Context, docID service.ID, afterOrdinal, limit int) ([]service.Chunk, error) {
	var rows []chunkRow
	if err := s.conn(ctx).Raw(`SELECT `+chunkColumns+`
		FROM chunks WHERE document_id = ? AND ordinal > ? ORDER BY ordinal LIMIT ?`,
		int64(docID), afterOrdinal, limit).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.Chunk, len(rows))
	for i, r := range rows {
		out[i] = r.chunk()
	}
	return out, nil
}

// ChunkIn returns the chunk with this id when it is in one of kbIDs (its
// document's chunks are deleted with it, so a live chunk has a live
// document).
func (s *Store) ChunkIn(ctx context.Context, id service.ID, kbIDs []service.ID) (*service.Chunk, error) {
	var rows []chunkRow
	if err := s.conn(ctx).Raw(`SELECT `+chunkColumns+`
		FROM chunks WHERE id = ? AND kb_id = ANY(?)`, int64(id), idArray(kbIDs)).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	if len(rows) == 0 {
		return nil, service.ErrNotFound
	}
	c := rows[0].chunk()
	return &c, nil
}
