package repository

import (
	"context"
	"time"

	"github.com/ragent-go/ragent/service"
)

// documentEvent queues a webhook delivery of a document's status for every
// live webhook of its knowledge base, in the caller's transaction (the one
// that changed the status), when the status is ready or failed. The payload
// is built from the row as it now is.
func (s *Store) documentEvent(docID int64) error {
	return translate(s.db.Exec(`INSERT INTO webhook_deliveries (webhook_id, event, payload)
		SELECT w.id, 'document.' || d.status, json_build_object(
			'type', 'document.' || d.status,
			'occurredAt', now(),
			'document', json_build_object('id', d.id::text, 'knowledgeBaseId', d.kb_id::text,
				'externalId', d.external_id, 'name', d.name, 'status', d.status, 'error', d.error,
				'generation', d.generation, 'chunkCount', d.chunk_count, 'updatedAt', d.updated_at))::text
		FROM documents d JOIN webhooks w ON w.kb_id = d.kb_id AND w.deleted_at IS NULL
		WHERE d.id = ? AND d.status IN ('ready', 'failed') AND d.deleted_at IS NULL`, docID).Error)
}

// CreateWebhook stores a webhook with its sealed secret.
func (s *Store) CreateWebhook(ctx context.Context, w *service.Webhook, secretEnc []byte, createdBy service.ID) error {
	var at time.Time
	err := s.conn(ctx).Raw(`INSERT INTO webhooks (id, kb_id, url, secret_enc, created_by) VALUES (?, ?, ?, ?, ?)
		RETURNING created_at`, int64(w.ID), int64(w.KnowledgeBaseID), w.URL, secretEnc, nullableID(createdBy)).Scan(&at).Error
	w.CreatedAt = at
	return translate(err)
}

// Webhooks lists a knowledge base's live webhooks with their creator,
// delivery counts and last error.
func (s *Store) Webhooks(ctx context.Context, kbID service.ID) ([]*service.Webhook, error) {
	var rows []struct {
		ID, KbID                 int64
		URL                      string
		CreatedBy                int64
		CreatorName              string
		Pending, Failed, Skipped int
		LastError                string
		CreatedAt                time.Time
	}
	if err := s.conn(ctx).Raw(`SELECT w.id, w.kb_id, w.url, w.created_at, coalesce(w.created_by, 0) AS created_by, coalesce(u.username, '') AS creator_name,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending') AS pending,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'failed') AS failed,
			(SELECT count(*) FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'skipped') AS skipped,
			coalesce((SELECT d.last_error FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.last_error <> ''
				ORDER BY d.id DESC LIMIT 1), '') AS last_error
		FROM webhooks w LEFT JOIN users u ON u.id = w.created_by
		WHERE w.kb_id = ? AND w.deleted_at IS NULL ORDER BY w.id`, int64(kbID)).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]*service.Webhook, len(rows))
	for i, r := range rows {
		out[i] = &service.Webhook{ID: service.ID(r.ID), KnowledgeBaseID: service.ID(r.KbID), URL: r.URL,
			CreatedBy: service.ID(r.CreatedBy), CreatedByName: r.CreatorName,
			Pending: r.Pending, Failed: r.Failed, Skipped: r.Skipped, LastError: r.LastError, CreatedAt: r.CreatedAt}
	}
	return out, nil
}

// DeleteWebhook removes a knowledge base's webhook; its undelivered events
// end failed.
func (s *Store) DeleteWebhook(ctx context.Context, kbID, id service.ID) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		if err := found(tx.db.Exec(`UPDATE webhooks SET deleted_at = now() WHERE id = ? AND kb_id = ? AND deleted_at IS NULL`,
			int64(id), int64(kbID))); err != nil {
			return err
		}
		return translate(tx.db.Exec(`UPDATE webhook_deliveries SET status = 'failed', last_error = 'the webhook was deleted'
			WHERE webhook_id = ? AND status = 'pending'`, int64(id)).Error)
	})
}

// deliveryClaimLock serializes delivery claims across instances, so that
// counting the deliveries in flight and leasing new ones is one step.
const deliveryClaimLock = 0x77686b63 // "whkc"

// ClaimDeliveries leases up to limit due deliveries to the caller until
// now+lease: at most one per webhook at a time (its oldest due one), none of
// a webhook that has a delivery in flight on any instance, so one slow
// receiver holds one deliverer and its events go out in order.
func (s *Store) ClaimDeliveries(ctx context.Context, lease time.Duration, limit int) ([]service.WebhookDelivery, error) {
	var rows []struct {
		ID, WebhookID, KbID int64
		CreatedBy           int64
		URL                 string
		SecretEnc           []byte
		Event               string
		Payload             string
		Attempts            int
	}
	err := s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SELECT pg_advisory_xact_lock(?)", deliveryClaimLock).Error; err != nil {
			return translate(err)
		}
		return translate(tx.db.Raw(`WITH due AS (
				SELECT id, webhook_id, next_attempt_at, row_number() OVER (PARTITION BY webhook_id ORDER BY id) AS n
				FROM webhook_deliveries
				WHERE status = 'pending' AND next_attempt_at <= now() AND (lease_until IS NULL OR lease_until < now())),
			pick AS (
				SELECT id FROM due WHERE n = 1 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries b
					WHERE b.webhook_id = due.webhook_id AND b.lease_until IS NOT NULL AND b.lease_until >= now() AND b.status = 'pending')
				ORDER BY next_attempt_at LIMIT ?),
			claimed AS (
				UPDATE webhook_deliveries d SET lease_until = now() + ? * interval '1 millisecond'
				FROM pick WHERE d.id = pick.id RETURNING d.id, d.webhook_id, d.event, d.payload, d.attempts)
			SELECT c.id, c.webhook_id, w.kb_id, coalesce(w.created_by, 0) AS created_by, w.url, w.secret_enc, c.event, c.payload, c.attempts
			FROM claimed c JOIN webhooks w ON w.id = c.webhook_id ORDER BY c.id`, limit, lease.Milliseconds()).Scan(&rows).Error)
	})
	if err != nil {
		return nil, err
	}
	out := make([]service.WebhookDelivery, len(rows))
	for i, r := range rows {
		out[i] = service.WebhookDelivery{ID: r.ID, WebhookID: service.ID(r.WebhookID), KnowledgeBaseID: service.ID(r.KbID),
			CreatedBy: service.ID(r.CreatedBy), URL: r.URL, SecretEnc: r.SecretEnc,
			Event: r.Event, Payload: []byte(r.Payload), Attempts: r.Attempts}
	}
	return out, nil
}

// FinishDelivery records an attempt: sent, retried after retryIn, or
// failed for good (dead-lettered) when retryIn is 0 and errMsg is set.
func (s *Store) FinishDelivery(ctx context.Context, id int64, errMsg string, retryIn time.Duration) error {
	q := `UPDATE webhook_deliveries SET attempts = attempts + 1, lease_until = NULL, last_error = ?,`
	switch {
	case errMsg == "":
		q += ` status = 'sent', sent_at = now() WHERE id = ?`
		return translate(s.conn(ctx).Exec(q, "", id).Error)
	case retryIn > 0:
		q += ` next_attempt_at = now() + ? * interval '1 millisecond' WHERE id = ?`
		return translate(s.conn(ctx).Exec(q, errMsg, retryIn.Milliseconds(), id).Error)
	default:
		q += ` status = 'failed' WHERE id = ?`
		return translate(s.conn(ctx).Exec(q, errMsg, id).Error)
	}
}

// SkipDelivery ends a delivery without sending it, for why; it is kept like
// a dead letter and counted apart.
func (s *Store) SkipDelivery(ctx context.Context, id int64, why string) error {
	return translate(s.conn(ctx).Exec(`UPDATE webhook_deliveries SET status = 'skipped', lease_until = NULL, last_error = ?
		WHERE id = ?`, why, id).Error)
}

// PruneDeliveries deletes up to limit deliveries: sent ones sent before
// sentBefore, failed and skipped ones made before doneBefore.
func (s *Store) PruneDeliveries(ctx context.Context, sentBefore, doneBefore time.Time, limit int) (int, error) {
	res := s.conn(ctx).Exec(`DELETE FROM webhook_deliveries WHERE
		id IN (SELECT id FROM webhook_deliveries WHERE status = 'sent' AND sent_at < ? LIMIT ? FOR UPDATE SKIP LOCKED) OR
		id IN (SELECT id FROM webhook_deliveries WHERE status IN ('failed', 'skipped') AND created_at < ? LIMIT ? FOR UPDATE SKIP LOCKED)`,
		sentBefore, limit, doneBefore, limit)
	return int(res.RowsAffected), translate(res.Error)
}
