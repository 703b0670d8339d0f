package repository

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/ragent-go/ragent/service"
)

type documentRow struct {
	ID         int64
	KbID       int64
	Name       string
	Mime       string
	Size       int64
	Sha256     *string // nil until an imported document's first fetch
	ExternalID *string
	Status     string
	Error      string
	ChunkCount int
	Generation int
	// Kind and CuratedChunks: migration 0019 (chunk curation).
	Kind          string `gorm:"default:file"`
	CuratedChunks int
	// OCR: migration 0025, set with the chunks (swapChunks).
	OCR       bool `gorm:"column:ocr"`
	Attempts  int
	StartedAt *time.Time
	CreatedBy *int64
	CreatedAt time.Time
	UpdatedAt time.Time
	DeletedAt gorm.DeletedAt
}

func (documentRow) TableName() string { return "documents" }

func (r documentRow) doc() *service.Document {
	d := &service.Document{
		ID: service.ID(r.ID), KnowledgeBaseID: service.ID(r.KbID), Name: r.Name, Mime: r.Mime, Size: r.Size,
		SHA256: deref(r.Sha256), Status: service.DocumentStatus(r.Status), Error: r.Error, ChunkCount: r.ChunkCount,
		Generation: r.Generation, Attempts: r.Attempts, ExternalID: deref(r.ExternalID),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		Kind: service.DocumentKind(r.Kind), CuratedChunks: r.CuratedChunks, OCR: r.OCR,
	}
	if d.Kind == "" {
		d.Kind = service.DocumentFile
	}
	if r.CreatedBy != nil {
		d.CreatedBy = service.ID(*r.CreatedBy)
	}
	return d
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nullable stores "" as NULL.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// CreateUpload stores the blob, the document (pending unless d.Status says
// otherwise) and the outbox row that asks for its ingestion (none when
// msg.Topic is empty) in one transaction. The same content in the same
// knowledge base is a service.ErrConflict carrying the existing document's
// id in its details; the unique index decides, not a check-then-insert.
func (s *Store) CreateUpload(ctx context.Context, d *service.Document, blob []byte, msg service.OutboxMessage) error {
	var queue service.MessageFor
	if msg.Topic != "" {
		queue = func(*service.Document) (service.OutboxMessage, error) { return msg, nil }
	}
	err := s.WithinTx(ctx, func(tx *Store) error { return tx.createDocument(d, blob, queue) })
	return s.explainConflict(ctx, d, err)
}

// Document returns a live document, with its source when it is imported.
func (s *Store) Document(ctx context.Context, id service.ID) (*service.Document, error) {
	var row documentRow
	if err := s.conn(ctx).Take(&row, int64(id)).Error; err != nil {
		return nil, translate(err)
	}
	doc := row.doc()
	return doc, s.withConn(ctx).attachSources([]*service.Document{doc})
}

// DocumentIn is Document restricted to the knowledge bases kbIDs: a
// document elsewhere is service.ErrNotFound, from the same one indexed
// query as an unknown id.
func (s *Store) DocumentIn(ctx context.Context, id service.ID, kbIDs []service.ID) (*service.Document, error) {
	var row documentRow
	if err := s.conn(ctx).Where("kb_id = ANY(?)", idArray(kbIDs)).Take(&row, int64(id)).Error; err != nil {
		return nil, translate(err)
	}
	doc := row.doc()
	return doc, s.withConn(ctx).attachSources([]*service.Document{doc})
}

// Documents lists a knowledge base's live documents, newest first, before
// the cursor (a document id; 0 = from the newest).
func (s *Store) Documents(ctx context.Context, kbID, before service.ID, limit int) ([]*service.Document, error) {
	return s.FindDocuments(ctx, kbID, service.DocumentQuery{Before: before, Limit: limit})
}

// DocumentBlob returns the original bytes of a document.
func (s *Store) DocumentBlob(ctx context.Context, sha256 string) ([]byte, error) {
	var row struct{ Bytes []byte }
	res := s.conn(ctx).Raw("SELECT bytes FROM document_blobs WHERE sha256 = ?", sha256).Scan(&row)
	if res.Error != nil {
		return nil, translate(res.Error)
	}
	if res.RowsAffected == 0 {
		return nil, service.ErrNotFound
	}
	return row.Bytes, nil
}

// DeleteDocument soft-deletes a document and removes its chunks at once, so
// it vanishes from search in the same transaction.
func (s *Store) DeleteDocument(ctx context.Context, id service.ID) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		var row documentRow
		if err := tx.db.Clauses(lockForUpdate).Take(&row, int64(id)).Error; err != nil {
			return translate(err)
		}
		removed, err := tx.removeChunks(row.ID, row.KbID)
		if err != nil {
			return err
		}
		if tx.search != nil {
			if err := tx.searchChanged(row.ID, row.Generation, removed, ""); err != nil {
				return err
			}
		}
		// A deleted import is fetched no more.
		if err := tx.db.Exec("DELETE FROM document_sources WHERE document_id = ?", row.ID).Error; err != nil {
			return translate(err)
		}
		return translate(tx.db.Delete(&documentRow{}, row.ID).Error)
	})
}

// Reindex starts a new generation of a document: it goes back to pending
// and an ingest message for the new generation is queued. Its current chunks
// stay searchable until the new generation replaces them.
func (s *Store) Reindex(ctx context.Context, id service.ID, outbox func(doc *service.Document) service.OutboxMessage) (*service.Document, error) {
	var doc *service.Document
	err := s.WithinTx(ctx, func(tx *Store) error {
		var row documentRow
		if err := tx.db.Clauses(lockForUpdate).Take(&row, int64(id)).Error; err != nil {
			return translate(err)
		}
		row.Generation++
		row.Status, row.Error, row.Attempts, row.StartedAt = string(service.DocumentPending), "", 0, nil
		if err := tx.db.Model(&row).Select("generation", "status", "error", "attempts", "started_at", "updated_at").
			Updates(&row).Error; err != nil {
			return translate(err)
		}
		doc = row.doc()
		return tx.enqueue(outbox(doc))
	})
	return doc, err
}

// ClaimDocument marks a document generation running and counts the attempt.
// It returns service.ErrNotFound when the document is gone, already finished
// (ready or failed) or the message is for a generation that is no longer
// current, so stale and repeated messages are dropped.
//
// The claim commits without waiting for its WAL flush: it is one of two
// commits per ingested document, and the flush wait was about a third of
// the database's time during ingestion (BENCHMARKS.md, "Retrieval at
// scale"). Losing it in a crash is harmless: the message is not acknowledged
// before the document's chunks commit (synchronously, which also flushes
// this earlier commit), so it is delivered again and claims again.
func (s *Store) ClaimDocument(ctx context.Context, id service.ID, generation int) (*service.Document, error) {
	var row documentRow
	err := s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SET LOCAL synchronous_commit = off").Error; err != nil {
			return translate(err)
		}
		return found(tx.db.Raw(`UPDATE documents SET status = 'running', attempts = attempts + 1,
			started_at = now(), updated_at = now(), error = ''
			WHERE id = ? AND generation = ? AND status IN ('pending', 'running') AND deleted_at IS NULL
			RETURNING *`, int64(id), generation).Scan(&row))
	})
	if err != nil {
		return nil, err
	}
	return row.doc(), nil
}

// FailDocument records a permanent failure of a generation, with its
// webhook events.
func (s *Store) FailDocument(ctx context.Context, id service.ID, generation int, reason string) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		res := tx.db.Exec(`UPDATE documents SET status = 'failed', error = ?, updated_at = now()
			WHERE id = ? AND generation = ? AND deleted_at IS NULL`, reason, int64(id), generation)
		if res.Error != nil || res.RowsAffected == 0 {
			return translate(res.Error)
		}
		return tx.documentEvent(int64(id))
	})
}

// StuckDocuments returns documents running since before the cutoff: their
// worker died or lost its message.
func (s *Store) StuckDocuments(ctx context.Context, cutoff time.Time, limit int) ([]*service.Document, error) {
	return find(s.conn(ctx).Where("status = 'running' AND started_at < ?", cutoff).
		// Chunks committed, waiting for the search engine: RequeueSearchIndex's.
		Where("search_pending_since IS NULL OR search_pending_since < started_at").Order("started_at").
		Limit(limit), documentRow.doc)
}

// RepublishPending gives up to limit documents pending since before the
// cutoff, whose ingest message has left the outbox (it was published), a
// fresh ingest message: the MQ lost theirs (a Redis restarted without its
// data) or still holds it behind a backlog, and then the second delivery is
// the consume guard's and the claim's to drop. Their updated_at moves on, so
// each is re-published once per bound. A URL import waiting for its first
// fetch has no content and is the fetcher's; a message still in the outbox
// is the relay's.
func (s *Store) RepublishPending(ctx context.Context, cutoff time.Time, limit int, queue service.MessageFor) (int, error) {
	n := 0
	err := s.WithinTx(ctx, func(tx *Store) error {
		var rows []documentRow
		if err := tx.db.Raw(`UPDATE documents SET updated_at = now() WHERE id IN (
				SELECT d.id FROM documents d
				WHERE d.status = 'pending' AND d.deleted_at IS NULL AND d.sha256 IS NOT NULL AND d.updated_at < ?
					AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.sent_at IS NULL AND o.topic = ?
						AND o.key = d.id || ':' || d.generation)
				ORDER BY d.updated_at LIMIT ? FOR UPDATE OF d SKIP LOCKED)
			RETURNING *`, cutoff, service.IngestTopic, limit).Scan(&rows).Error; err != nil {
			return translate(err)
		}
		for _, r := range rows {
			if err := tx.queue(r.doc(), queue); err != nil {
				return err
			}
		}
		n = len(rows)
		return nil
	})
	return n, err
}

// Requeue puts a stuck document back to pending with a fresh outbox row,
// unless another worker moved it on since it was read.
func (s *Store) Requeue(ctx context.Context, d *service.Document, msg service.OutboxMessage) (bool, error) {
	requeued := false
	err := s.WithinTx(ctx, func(tx *Store) error {
		res := tx.db.Exec(`UPDATE documents SET status = 'pending', started_at = NULL, updated_at = now()
			WHERE id = ? AND generation = ? AND status = 'running' AND deleted_at IS NULL`, int64(d.ID), d.Generation)
		if res.Error != nil {
			return translate(res.Error)
		}
		if res.RowsAffected == 0 {
			return nil
		}
		requeued = true
		return tx.enqueue(msg)
	})
	return requeued, err
}

// DocumentCounts counts the live documents by status: the ingestion
// dashboard's gauge (one scan of documents per call, so callers poll it
// every few tens of seconds, not per request).
func (s *Store) DocumentCounts(ctx context.Context) (map[service.DocumentStatus]int64, error) {
	var rows []struct {
		Status string
		N      int64
	}
	err := s.conn(ctx).Raw(`SELECT status, count(*) AS n FROM documents WHERE deleted_at IS NULL GROUP BY status`).Scan(&rows).Error
	if err != nil {
		return nil, translate(err)
	}
	out := make(map[service.DocumentStatus]int64, len(rows))
	for _, r := range rows {
		out[service.DocumentStatus(r.Status)] = r.N
	}
	return out, nil
}
