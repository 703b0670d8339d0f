package repository

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ragent-go/ragent/service"
)

type sourceRow struct {
	DocumentID     int64
	URL            string
	RefreshSeconds int
	Etag           string
	LastModified   string
	NextFetchAt    *time.Time
	LeaseUntil     *time.Time
	FetchedAt      *time.Time
	LastError      string
}

func (sourceRow) TableName() string { return "document_sources" }

func (r sourceRow) source() *service.DocumentSource {
	return &service.DocumentSource{URL: r.URL, RefreshSeconds: r.RefreshSeconds, ETag: r.Etag,
		LastModified: r.LastModified, FetchedAt: r.FetchedAt, NextFetchAt: r.NextFetchAt, LastError: r.LastError}
}

// withConn is s on the connection of ctx (see conn).
func (s *Store) withConn(ctx context.Context) *Store {
	return &Store{db: s.conn(ctx), log: s.log, search: s.search}
}

// lockExternalID serializes the writers of one external id in a knowledge
// base for the rest of the transaction, so two first uploads of the same id
// make one document and not a unique-index error.
func (s *Store) lockExternalID(kbID service.ID, externalID string) error {
	return translate(s.db.Exec(`SELECT pg_advisory_xact_lock(hashtextextended(?, 0))`,
		fmt.Sprintf("document-external-id:%d:%s", kbID, externalID)).Error)
}

// byExternalID locks the live document with an external id.
func (s *Store) byExternalID(kbID service.ID, externalID string) (*documentRow, error) {
	var row documentRow
	if err := s.db.Clauses(lockForUpdate).Where("kb_id = ? AND external_id = ?", int64(kbID), externalID).
		Take(&row).Error; err != nil {
		return nil, translate(err)
	}
	return &row, nil
}

// PutVersion stores d under its external id: a new document if the
// knowledge base has none with that id, else a new generation of that
// document, whose current chunks stay searchable until the new generation's
// replace them in one transaction (ReplaceChunks). The same content as the
// current version changes nothing (changed is false) unless that version
// failed. A pending version's ingest message is queued in the same
// transaction.
func (s *Store) PutVersion(ctx context.Context, d *service.Document, blob []byte, queue service.MessageFor) (doc *service.Document, changed bool, err error) {
	err = s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.lockExternalID(d.KnowledgeBaseID, d.ExternalID); err != nil {
			return err
		}
		row, err := tx.byExternalID(d.KnowledgeBaseID, d.ExternalID)
		if errors.Is(err, service.ErrNotFound) {
			doc, changed = d, true
			return tx.createDocument(d, blob, queue)
		}
		if err != nil {
			return err
		}
		doc, changed, err = tx.newVersion(row, d, blob, queue)
		return err
	})
	if err != nil {
		return nil, false, s.explainConflict(ctx, d, err)
	}
	return doc, changed, nil
}

// explainConflict names the document that already has d's content when err
// is the unique index on (knowledge base, content).
func (s *Store) explainConflict(ctx context.Context, d *service.Document, err error) error {
	if !errors.Is(err, service.ErrConflict) || d.SHA256 == "" {
		return err
	}
	var existing documentRow
	if e := s.conn(ctx).Where("kb_id = ? AND sha256 = ?", int64(d.KnowledgeBaseID), d.SHA256).Take(&existing).Error; e == nil {
		return service.WithDetails(service.ErrConflict, "this file is already in the knowledge base",
			map[string]string{"documentId": service.ID(existing.ID).String()})
	}
	return err
}

// createDocument inserts a new document (generation 1) and its blob, with
// the ingest message of a pending one (none when queue is nil or there is
// no content yet) or the webhook events of a failed one.
func (s *Store) createDocument(d *service.Document, blob []byte, queue service.MessageFor) error {
	if d.SHA256 != "" {
		if err := s.db.Exec(`INSERT INTO document_blobs (sha256, bytes, size) VALUES (?, ?, ?)
			ON CONFLICT (sha256) DO NOTHING`, d.SHA256, blob, int64(len(blob))).Error; err != nil {
			return translate(err)
		}
	}
	if d.Status == "" {
		d.Status = service.DocumentPending
	}
	row := documentRow{
		ID: int64(d.ID), KbID: int64(d.KnowledgeBaseID), Name: d.Name, Mime: d.Mime, Size: d.Size,
		Sha256: nullable(d.SHA256), ExternalID: nullable(d.ExternalID), Status: string(d.Status), Error: d.Error, Generation: 1,
		CreatedBy: nullableID(d.CreatedBy),
	}
	if err := s.db.Create(&row).Error; err != nil {
		return translate(err)
	}
	d.Generation, d.CreatedAt, d.UpdatedAt = 1, row.CreatedAt, row.UpdatedAt
	if d.Status == service.DocumentFailed {
		return s.documentEvent(row.ID)
	}
	if queue == nil || d.SHA256 == "" {
		return nil
	}
	return s.queue(d, queue)
}

func (s *Store) queue(d *service.Document, queue service.MessageFor) error {
	msg, err := queue(d)
	if err != nil {
		return err
	}
	return s.enqueue(msg)
}

// newVersion makes v the current version of the locked document row.
func (s *Store) newVersion(row *documentRow, v *service.Document, blob []byte, queue service.MessageFor) (*service.Document, bool, error) {
	if row.Sha256 != nil && *row.Sha256 == v.SHA256 && row.Status != string(service.DocumentFailed) {
		return row.doc(), false, nil
	}
	if err := s.db.Exec(`INSERT INTO document_blobs (sha256, bytes, size) VALUES (?, ?, ?)
		ON CONFLICT (sha256) DO NOTHING`, v.SHA256, blob, int64(len(blob))).Error; err != nil {
		return nil, false, translate(err)
	}
	// An import before its first fetch has no chunks and no generation in
	// flight: its first content is generation 1.
	if row.Sha256 != nil {
		row.Generation++
	}
	status := v.Status
	if status == "" {
		status = service.DocumentPending
	}
	row.Name, row.Mime, row.Size, row.Sha256 = v.Name, v.Mime, v.Size, nullable(v.SHA256)
	row.Status, row.Error, row.Attempts, row.StartedAt = string(status), v.Error, 0, nil
	if err := s.db.Model(row).Select("name", "mime", "size", "sha256", "generation", "status", "error",
		"attempts", "started_at", "updated_at").Updates(row).Error; err != nil {
		return nil, false, translate(err)
	}
	doc := row.doc()
	if status != service.DocumentPending {
		return doc, true, s.documentEvent(row.ID)
	}
	return doc, true, s.queue(doc, queue)
}

// Import records a document to be fetched from src.URL: a new document
// without content, or — when a live document has d's external id — that
// document, which keeps serving its current version until a fetch brings a
// new one. Either way it is due for a fetch now.
func (s *Store) Import(ctx context.Context, d *service.Document, src service.DocumentSource) (*service.Document, error) {
	var doc *service.Document
	err := s.WithinTx(ctx, func(tx *Store) error {
		doc = d
		if d.ExternalID != "" {
			if err := tx.lockExternalID(d.KnowledgeBaseID, d.ExternalID); err != nil {
				return err
			}
			row, err := tx.byExternalID(d.KnowledgeBaseID, d.ExternalID)
			switch {
			case err == nil:
				doc = row.doc()
			case !errors.Is(err, service.ErrNotFound):
				return err
			}
		}
		if doc == d {
			d.Status = service.DocumentPending
			if err := tx.createDocument(d, nil, nil); err != nil {
				return err
			}
		}
		// A new URL starts without validators: the old ones are another
		// server's.
		err := tx.db.Exec(`INSERT INTO document_sources (document_id, url, refresh_seconds, next_fetch_at)
			VALUES (?, ?, ?, now())
			ON CONFLICT (document_id) DO UPDATE SET url = excluded.url, refresh_seconds = excluded.refresh_seconds,
				next_fetch_at = now(), last_error = '',
				etag = CASE WHEN document_sources.url = excluded.url THEN document_sources.etag ELSE '' END,
				last_modified = CASE WHEN document_sources.url = excluded.url THEN document_sources.last_modified ELSE '' END`,
			int64(doc.ID), src.URL, src.RefreshSeconds).Error
		if err != nil {
			return translate(err)
		}
		return tx.attachSources([]*service.Document{doc})
	})
	return doc, err
}

// fetchClaimLock serializes fetch claims across instances, so that
// counting a knowledge base's fetches in flight and leasing new ones is one
// step.
const fetchClaimLock = 0x66746368 // "ftch"

// ClaimDueSources leases up to limit imported documents that are due for a
// fetch to the caller until now+lease, at most perKB of one knowledge base
// in flight at once across all instances (so one knowledge base's slow URLs
// leave the other knowledge bases their share), taking knowledge bases in
// turn. Every instance calls it; the claim lock and the lease keep two
// fetchers off one document, and a fetcher that dies leaves a lease that
// runs out.
func (s *Store) ClaimDueSources(ctx context.Context, lease time.Duration, limit, perKB int) ([]*service.Document, error) {
	var ids []int64
	err := s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SELECT pg_advisory_xact_lock(?)", fetchClaimLock).Error; err != nil {
			return translate(err)
		}
		return translate(tx.db.Raw(`WITH busy AS (
				SELECT d.kb_id, count(*) AS n FROM document_sources s JOIN documents d ON d.id = s.document_id
				WHERE s.lease_until IS NOT NULL AND s.lease_until >= now() GROUP BY d.kb_id),
			due AS (
				SELECT s.document_id, d.kb_id, s.next_fetch_at,
					row_number() OVER (PARTITION BY d.kb_id ORDER BY s.next_fetch_at, s.document_id) AS n
				FROM document_sources s JOIN documents d ON d.id = s.document_id AND d.deleted_at IS NULL
				WHERE s.next_fetch_at <= now() AND (s.lease_until IS NULL OR s.lease_until < now())),
			pick AS (
				SELECT due.document_id FROM due LEFT JOIN busy ON busy.kb_id = due.kb_id
				WHERE due.n + coalesce(busy.n, 0) <= ?
				ORDER BY due.n, due.next_fetch_at LIMIT ?)
			UPDATE document_sources s SET lease_until = now() + ? * interval '1 millisecond'
			FROM pick WHERE s.document_id = pick.document_id
			RETURNING s.document_id`, perKB, limit, lease.Milliseconds()).Scan(&ids).Error)
	})
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	out, err := find(s.conn(ctx).Where("id IN ?", ids).Order("id"), documentRow.doc)
	if err != nil {
		return nil, err
	}
	return out, s.withConn(ctx).attachSources(out)
}

// FinishFetch records a fetch of a claimed document and releases its lease.
// New content becomes a new version as in PutVersion; a failed first fetch
// fails the document (nothing is served), a failed refresh only records the
// error on the source, leaving the served version alone.
func (s *Store) FinishFetch(ctx context.Context, docID service.ID, f service.Fetched, queue service.MessageFor) (*service.Document, error) {
	var doc *service.Document
	err := s.WithinTx(ctx, func(tx *Store) error {
		var row documentRow
		if err := tx.db.Clauses(lockForUpdate).Take(&row, int64(docID)).Error; err != nil {
			return translate(err)
		}
		doc = row.doc()
		switch {
		case f.Version != nil:
			v, _, err := tx.newVersion(&row, f.Version, f.Blob, queue)
			if err != nil {
				return err
			}
			doc = v
		case f.Err != "" && row.Sha256 == nil:
			if err := tx.db.Exec(`UPDATE documents SET status = 'failed', error = ?, updated_at = now() WHERE id = ?`,
				f.Err, row.ID).Error; err != nil {
				return translate(err)
			}
			doc.Status, doc.Error = service.DocumentFailed, f.Err
			if err := tx.documentEvent(row.ID); err != nil {
				return err
			}
		}
		set := map[string]any{"lease_until": nil, "last_error": f.Err,
			"next_fetch_at": gorm.Expr("CASE WHEN refresh_seconds > 0 THEN now() + refresh_seconds * interval '1 second' END")}
		if f.Err == "" {
			set["fetched_at"] = gorm.Expr("now()")
			if f.ETag != "" || f.LastModified != "" || f.Version != nil {
				set["etag"], set["last_modified"] = f.ETag, f.LastModified
			}
		}
		if err := tx.db.Model(&sourceRow{}).Where("document_id = ?", row.ID).Updates(set).Error; err != nil {
			return translate(err)
		}
		return tx.attachSources([]*service.Document{doc})
	})
	if err != nil && f.Version != nil {
		return nil, s.explainConflict(ctx, f.Version, err)
	}
	return doc, err
}

// attachSources fills in the source of the imported documents among docs.
func (s *Store) attachSources(docs []*service.Document) error {
	if len(docs) == 0 {
		return nil
	}
	ids := make([]int64, len(docs))
	for i, d := range docs {
		ids[i] = int64(d.ID)
	}
	var rows []sourceRow
	if err := s.db.Where("document_id IN ?", ids).Find(&rows).Error; err != nil {
		return translate(err)
	}
	by := make(map[int64]*service.DocumentSource, len(rows))
	for _, r := range rows {
		by[r.DocumentID] = r.source()
	}
	for _, d := range docs {
		d.Source = by[int64(d.ID)]
	}
	return nil
}

// FindDocuments lists a knowledge base's live documents matching q, newest
// first, with their sources.
func (s *Store) FindDocuments(ctx context.Context, kbID service.ID, q service.DocumentQuery) ([]*service.Document, error) {
	db := s.conn(ctx).Where("kb_id = ?", int64(kbID)).Order("id DESC").Limit(q.Limit)
	if q.Before > 0 {
		db = db.Where("id < ?", int64(q.Before))
	}
	db = whereSet(db, "external_id = ?", q.ExternalID)
	db = whereSet(db, "status = ?", string(q.Status))
	if !q.UpdatedSince.IsZero() {
		db = db.Where("updated_at >= ?", q.UpdatedSince)
	}
	out, err := find(db, documentRow.doc)
	if err != nil {
		return nil, err
	}
	return out, s.withConn(ctx).attachSources(out)
}
