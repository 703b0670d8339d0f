package repository

import (
	"context"
	"fmt"

	"github.com/pgvector/pgvector-go"

	"github.com/ragent-go/ragent/service"
)

// Re-embedding moves a knowledge base's vectors into another embedding
// space without ever mixing two spaces (docs/embeddings.md "Embedding model changes"):
// the new vectors go to chunks.next_embedding, document by document, while
// search keeps using chunks.embedding in the recorded space; FinishReembed
// swaps them in one transaction once every document with chunks is done.

// PlanReembed makes every live knowledge base not in target move to it:
// it records target as the knowledge base's re-embedding target, forgets
// the progress of an earlier target, and queues, through the outbox, one
// message per document with chunks (msg builds it). A knowledge base
// already moving to target is left alone, so every instance may call it at
// start (under the startup lock) and only the first plans anything; one
// moving elsewhere while already in target stops moving. It returns the
// knowledge bases that now move to target.
func (s *Store) PlanReembed(ctx context.Context, target service.EmbeddingSpace,
	msg func(doc *service.Document) (service.OutboxMessage, error)) ([]service.ID, error) {
	key := target.Key()
	if err := s.EnsureVectorIndex(ctx, target.Dim); err != nil {
		return nil, err
	}
	var cancel []int64
	if err := s.conn(ctx).Raw(`SELECT id FROM knowledge_bases WHERE deleted_at IS NULL AND embedding_space = ?
		AND reembed_space IS NOT NULL`, key).Scan(&cancel).Error; err != nil {
		return nil, translate(err)
	}
	for _, id := range cancel {
		err := s.WithinTx(ctx, func(tx *Store) error {
			if err := tx.db.Exec(`UPDATE knowledge_bases SET reembed_model = NULL, reembed_dim = NULL, reembed_query_prefix = NULL,
				reembed_document_prefix = NULL, reembed_space = NULL WHERE id = ?`, id).Error; err != nil {
				return translate(err)
			}
			return translate(tx.db.Exec(`UPDATE chunks SET next_embedding = NULL WHERE kb_id = ? AND next_embedding IS NOT NULL`, id).Error)
		})
		if err != nil {
			return nil, err
		}
	}
	var move []int64
	if err := s.conn(ctx).Raw(`SELECT id FROM knowledge_bases WHERE deleted_at IS NULL AND embedding_space <> ?
		AND reembed_space IS DISTINCT FROM ? ORDER BY id`, key, key).Scan(&move).Error; err != nil {
		return nil, translate(err)
	}
	for _, id := range move {
		if err := s.planOne(ctx, id, target, msg); err != nil {
			return nil, err
		}
	}
	var moving []service.ID
	if err := s.conn(ctx).Raw(`SELECT id FROM knowledge_bases WHERE deleted_at IS NULL AND reembed_space = ? ORDER BY id`, key).
		Scan(&moving).Error; err != nil {
		return nil, translate(err)
	}
	return moving, nil
}

// planOne starts one knowledge base's move in one transaction.
func (s *Store) planOne(ctx context.Context, kbID int64, target service.EmbeddingSpace,
	msg func(doc *service.Document) (service.OutboxMessage, error)) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		res := tx.db.Exec(`UPDATE knowledge_bases SET reembed_model = ?, reembed_dim = ?, reembed_query_prefix = ?,
			reembed_document_prefix = ?, reembed_space = ? WHERE id = ? AND deleted_at IS NULL`,
			target.Model, target.Dim, target.QueryPrefix, target.DocumentPrefix, target.Key(), kbID)
		if res.Error != nil || res.RowsAffected == 0 {
			return translate(res.Error)
		}
		if err := tx.db.Exec(`UPDATE chunks SET next_embedding = NULL WHERE kb_id = ? AND next_embedding IS NOT NULL`, kbID).Error; err != nil {
			return translate(err)
		}
		if err := tx.db.Exec(`UPDATE documents SET reembedded_space = '' WHERE kb_id = ? AND reembedded_space <> ''`, kbID).Error; err != nil {
			return translate(err)
		}
		var docs []documentRow
		if err := tx.db.Where("kb_id = ? AND chunk_count > 0", kbID).Order("id").Find(&docs).Error; err != nil {
			return translate(err)
		}
		for _, d := range docs {
			m, err := msg(d.doc())
			if err != nil {
				return err
			}
			if err := tx.enqueue(m); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReembedChunks returns the chunks (id and content, in order) of a document
// that still needs vectors in the space with key space: none when the
// document is gone or already done.
func (s *Store) ReembedChunks(ctx context.Context, docID service.ID, space string) ([]service.Chunk, error) {
	var rows []struct {
		ID      int64
		Content string
	}
	if err := s.conn(ctx).Raw(`SELECT c.id, c.content FROM chunks c JOIN documents d ON d.id = c.document_id
		WHERE c.document_id = ? AND d.deleted_at IS NULL AND d.reembedded_space <> ? ORDER BY c.ordinal`,
		int64(docID), space).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.Chunk, len(rows))
	for i, r := range rows {
		out[i] = service.Chunk{ID: service.ID(r.ID), DocumentID: docID, Content: r.Content}
	}
	return out, nil
}

// StoreReembedded writes the next vectors of a document's chunks (as
// ReembedChunks returned them, Embedding filled) and marks the document done
// for space, in one transaction. It returns service.ErrNotFound when the
// chunks were replaced meanwhile (their new generation was embedded into the
// target already) and ErrSpaceChanged when the knowledge base no longer
// moves to space.
func (s *Store) StoreReembedded(ctx context.Context, docID service.ID, space string, chunks []service.Chunk) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		var row documentRow
		if err := tx.db.Clauses(lockForUpdate).Take(&row, int64(docID)).Error; err != nil {
			return translate(err)
		}
		// The share lock keeps FinishReembed from switching until these
		// vectors are in.
		next, err := tx.spaceRole(row.KbID, space, "FOR SHARE")
		if err != nil {
			return err
		}
		if !next {
			return fmt.Errorf("%w: knowledge base %d is in %s already", ErrSpaceChanged, row.KbID, space)
		}
		for _, c := range chunks {
			res := tx.db.Exec(`UPDATE chunks SET next_embedding = ? WHERE id = ? AND document_id = ?`,
				pgvector.NewHalfVector(c.Embedding), int64(c.ID), row.ID)
			if res.Error != nil {
				return translate(res.Error)
			}
			if res.RowsAffected == 0 {
				return fmt.Errorf("%w: chunk %d of document %d was replaced", service.ErrNotFound, c.ID, docID)
			}
		}
		return translate(tx.db.Exec(`UPDATE documents SET reembedded_space = ? WHERE id = ?`, space, row.ID).Error)
	})
}

// FinishReembed switches a knowledge base to the space it moves to (key
// space) once every live document with chunks is done: in one transaction
// the next vectors become the vectors, chunks without one (of a document
// that failed meanwhile) lose theirs rather than keep one of the old space,
// and the target becomes the recorded space. It reports whether it switched;
// false means documents are left, or the knowledge base moves elsewhere.
func (s *Store) FinishReembed(ctx context.Context, kbID service.ID, space string) (bool, error) {
	switched := false
	err := s.WithinTx(ctx, func(tx *Store) error {
		var kb knowledgeBaseRow
		if err := tx.db.Clauses(lockForUpdate).Take(&kb, int64(kbID)).Error; err != nil {
			return translate(err)
		}
		if kb.ReembedSpace == nil || *kb.ReembedSpace != space || kb.ReembedDim == nil {
			return nil
		}
		var left int64
		if err := tx.db.Raw(`SELECT count(*) FROM documents WHERE kb_id = ? AND deleted_at IS NULL AND chunk_count > 0
			AND reembedded_space <> ?`, kb.ID, space).Scan(&left).Error; err != nil {
			return translate(err)
		}
		if left > 0 {
			return nil
		}
		if err := tx.db.Exec(`UPDATE chunks SET embedding = next_embedding, next_embedding = NULL,
			embedding_dim = CASE WHEN next_embedding IS NULL THEN 0 ELSE ? END,
			embedding_space = CASE WHEN next_embedding IS NULL THEN '' ELSE ? END
			WHERE kb_id = ?`, *kb.ReembedDim, space, kb.ID).Error; err != nil {
			return translate(err)
		}
		if err := tx.db.Exec(`UPDATE knowledge_bases SET embedding_model = reembed_model, embedding_dim = reembed_dim,
			embedding_query_prefix = reembed_query_prefix, embedding_document_prefix = reembed_document_prefix,
			embedding_space = reembed_space, reembed_model = NULL, reembed_dim = NULL, reembed_query_prefix = NULL,
			reembed_document_prefix = NULL, reembed_space = NULL, updated_at = now() WHERE id = ?`, kb.ID).Error; err != nil {
			return translate(err)
		}
		if tx.search != nil {
			// The search engine's vectors move too.
			if err := tx.searchKnowledgeBase(kb.ID, nil); err != nil {
				return err
			}
		}
		switched = true
		return nil
	})
	return switched, err
}

// Reembedding returns the live knowledge bases moving to another space,
// with the key of that space.
func (s *Store) Reembedding(ctx context.Context) (map[service.ID]string, error) {
	var rows []struct {
		ID           int64
		ReembedSpace string
	}
	if err := s.conn(ctx).Raw(`SELECT id, reembed_space FROM knowledge_bases WHERE deleted_at IS NULL AND reembed_space IS NOT NULL`).
		Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make(map[service.ID]string, len(rows))
	for _, r := range rows {
		out[service.ID(r.ID)] = r.ReembedSpace
	}
	return out, nil
}
