package repository

import (
	"context"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/ragent-go/ragent/service"
)

type knowledgeBaseRow struct {
	ID             int64
	Name           string
	Description    string
	EmbeddingModel string
	EmbeddingDim   int
	// The rest of the recorded embedding space, and the re-embedding target
	// (NULL when none) with its progress (docs/embeddings.md "Embedding model changes").
	EmbeddingQueryPrefix    string
	EmbeddingDocumentPrefix string
	EmbeddingSpace          string
	ReembedModel            *string
	ReembedDim              *int
	ReembedQueryPrefix      *string
	ReembedDocumentPrefix   *string
	ReembedSpace            *string
	ReembedDone             int `gorm:"->;-:migration"`
	ReembedTotal            int `gorm:"->;-:migration"`
	ChunkSize               int
	ChunkOverlap            int
	VectorWeight            float64
	Visibility              string
	CreatedAt               time.Time
	UpdatedAt               time.Time
	DeletedAt               gorm.DeletedAt
	DocumentCount           int `gorm:"->;-:migration"`
}

func (knowledgeBaseRow) TableName() string { return "knowledge_bases" }

func (r knowledgeBaseRow) kb() *service.KnowledgeBase {
	kb := &service.KnowledgeBase{
		ID: service.ID(r.ID), Name: r.Name, Description: r.Description,
		EmbeddingModel: r.EmbeddingModel, EmbeddingDim: r.EmbeddingDim,
		EmbeddingQueryPrefix: r.EmbeddingQueryPrefix, EmbeddingDocumentPrefix: r.EmbeddingDocumentPrefix,
		ChunkSize: r.ChunkSize, ChunkOverlap: r.ChunkOverlap, VectorWeight: r.VectorWeight,
		Visibility: service.Visibility(r.Visibility), DocumentCount: r.DocumentCount, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	if r.ReembedSpace != nil && r.ReembedModel != nil && r.ReembedDim != nil {
		kb.Reembedding = &service.Reembedding{Target: service.EmbeddingSpace{
			Model: *r.ReembedModel, Dim: *r.ReembedDim, QueryPrefix: deref(r.ReembedQueryPrefix), DocumentPrefix: deref(r.ReembedDocumentPrefix),
		}, Done: r.ReembedDone, Total: r.ReembedTotal}
	}
	return kb
}

// kbColumns selects a knowledge base with its live document count and,
// while it is re-embedded, how many documents with chunks are done.
const kbColumns = `knowledge_bases.*, (SELECT count(*) FROM documents d
	WHERE d.kb_id = knowledge_bases.id AND d.deleted_at IS NULL) AS document_count,
	CASE WHEN knowledge_bases.reembed_space IS NULL THEN 0 ELSE (SELECT count(*) FROM documents d
	WHERE d.kb_id = knowledge_bases.id AND d.deleted_at IS NULL AND d.chunk_count > 0
	AND d.reembedded_space = knowledge_bases.reembed_space) END AS reembed_done,
	CASE WHEN knowledge_bases.reembed_space IS NULL THEN 0 ELSE (SELECT count(*) FROM documents d
	WHERE d.kb_id = knowledge_bases.id AND d.deleted_at IS NULL AND d.chunk_count > 0) END AS reembed_total`

// kbNamesLockKey is the advisory lock that serialises knowledge-base name
// checks with the writes they guard.
const kbNamesLockKey = 0x6b626e6d // "kbnm"

// nameTaken locks the knowledge-base names for the rest of s's
// transaction and reports whether a live knowledge base other than except
// is named name; among, when not nil, limits the check to those.
func (s *Store) nameTaken(name string, except service.ID, among []service.ID) (bool, error) {
	if err := s.db.Exec("SELECT pg_advisory_xact_lock(?)", kbNamesLockKey).Error; err != nil {
		return false, translate(err)
	}
	q := s.db.Model(&knowledgeBaseRow{}).Where("name = ? AND id <> ?", name, int64(except))
	if among != nil {
		q = q.Where("id = ANY(?)", idArray(among))
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		return false, translate(err)
	}
	return n > 0, nil
}

// CreateKnowledgeBase inserts kb; a name any live knowledge base has is
// service.ErrConflict (only admins create, and they read every one).
func (s *Store) CreateKnowledgeBase(ctx context.Context, kb *service.KnowledgeBase) error {
	row := knowledgeBaseRow{
		ID: int64(kb.ID), Name: kb.Name, Description: kb.Description,
		EmbeddingModel: kb.EmbeddingModel, EmbeddingDim: kb.EmbeddingDim,
		EmbeddingQueryPrefix: kb.EmbeddingQueryPrefix, EmbeddingDocumentPrefix: kb.EmbeddingDocumentPrefix,
		EmbeddingSpace: kb.Space().Key(),
		ChunkSize:      kb.ChunkSize, ChunkOverlap: kb.ChunkOverlap, VectorWeight: kb.VectorWeight,
		Visibility: string(kb.Visibility),
	}
	if row.Visibility == "" {
		row.Visibility = string(service.VisibilityPrivate)
		kb.Visibility = service.VisibilityPrivate
	}
	err := s.WithinTx(ctx, func(tx *Store) error {
		taken, err := tx.nameTaken(row.Name, kb.ID, nil)
		if err != nil {
			return err
		}
		if taken {
			return service.ErrConflict
		}
		return translate(tx.db.Omit("DocumentCount", "ReembedDone", "ReembedTotal").Create(&row).Error)
	})
	if err != nil {
		return err
	}
	kb.CreatedAt, kb.UpdatedAt = row.CreatedAt, row.UpdatedAt
	return s.EnsureVectorIndex(ctx, kb.EmbeddingDim)
}

// KnowledgeBase returns a live knowledge base.
func (s *Store) KnowledgeBase(ctx context.Context, id service.ID) (*service.KnowledgeBase, error) {
	return take(s.conn(ctx).Select(kbColumns), knowledgeBaseRow.kb, int64(id))
}

// KnowledgeBases returns live knowledge bases in id order after the cursor;
// limit <= 0 returns all.
func (s *Store) KnowledgeBases(ctx context.Context, after service.ID, limit int) ([]*service.KnowledgeBase, error) {
	q := s.conn(ctx).Select(kbColumns).Where("id > ?", int64(after)).Order("id")
	return find(limitTo(q, limit), knowledgeBaseRow.kb)
}

// KnowledgeBasesIn is KnowledgeBases restricted to the given ids.
func (s *Store) KnowledgeBasesIn(ctx context.Context, ids []service.ID, after service.ID, limit int) ([]*service.KnowledgeBase, error) {
	q := s.conn(ctx).Select(kbColumns).Where("id > ? AND id = ANY(?)", int64(after), idArray(ids)).Order("id")
	return find(limitTo(q, limit), knowledgeBaseRow.kb)
}

// UpdateKnowledgeBase stores the editable fields of kb. Its name must not
// be another live knowledge base's among nameAmong (every live one when
// nil): service.ErrConflict.
func (s *Store) UpdateKnowledgeBase(ctx context.Context, kb *service.KnowledgeBase, nameAmong []service.ID) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		taken, err := tx.nameTaken(kb.Name, kb.ID, nameAmong)
		if err != nil {
			return err
		}
		if taken {
			return service.ErrConflict
		}
		return found(tx.db.Model(&knowledgeBaseRow{ID: int64(kb.ID)}).Updates(map[string]any{
			"name": kb.Name, "description": kb.Description, "chunk_size": kb.ChunkSize,
			"chunk_overlap": kb.ChunkOverlap, "vector_weight": kb.VectorWeight, "visibility": string(kb.Visibility), "updated_at": time.Now().UTC(),
		}))
	})
}

// DeleteKnowledgeBase soft-deletes a knowledge base with its documents and
// removes their chunks, so nothing of it is searchable afterwards.
func (s *Store) DeleteKnowledgeBase(ctx context.Context, id service.ID) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		db := tx.db
		if err := found(db.Delete(&knowledgeBaseRow{}, int64(id))); err != nil {
			return err
		}
		var gone []struct{ ID, DocumentID int64 }
		if err := db.Raw("DELETE FROM chunks WHERE kb_id = ? RETURNING id, document_id", int64(id)).Scan(&gone).Error; err != nil {
			return translate(err)
		}
		if tx.search != nil {
			// The search engine's copies of the documents go too.
			removed := map[int64][]int64{}
			for _, g := range gone {
				removed[g.DocumentID] = append(removed[g.DocumentID], g.ID)
			}
			if err := tx.searchKnowledgeBase(int64(id), removed); err != nil {
				return err
			}
		}
		if err := db.Exec("UPDATE documents SET deleted_at = now() WHERE kb_id = ? AND deleted_at IS NULL", int64(id)).Error; err != nil {
			return translate(err)
		}
		if err := db.Exec("DELETE FROM kb_members WHERE kb_id = ?", int64(id)).Error; err != nil {
			return translate(err)
		}
		return tx.dropKeywordIndex(int64(id))
	})
}

// EnsureVectorIndex creates the HNSW cosine index for one embedding
// dimension if it does not exist yet. The dimension is an integer validated
// by the schema's CHECK, so formatting it into DDL is safe.
func (s *Store) EnsureVectorIndex(ctx context.Context, dim int) error {
	if dim < 1 || dim > 4000 {
		return service.Errorf(service.ErrInvalid, "embedding dimension %d out of range", dim)
	}
	sql := "CREATE INDEX IF NOT EXISTS chunks_embedding_" + strconv.Itoa(dim) +
		" ON chunks USING hnsw ((embedding::halfvec(" + strconv.Itoa(dim) + ")) halfvec_cosine_ops) WHERE embedding_dim = " + strconv.Itoa(dim)
	return translate(s.conn(ctx).Exec(sql).Error)
}
