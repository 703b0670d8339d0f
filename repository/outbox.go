package repository

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/ragent-go/ragent/service"
)

// enqueue adds an outbox row in the receiver's transaction. The ingest
// message of a document generation not yet published waits for its
// knowledge base's turn (enqueueTurn, RelayIngest); every other goes out
// at once.
func (s *Store) enqueue(m service.OutboxMessage) error {
	if queued, err := s.enqueueTurn(m); queued || err != nil {
		return err
	}
	return translate(s.db.Exec("INSERT INTO outbox (id, topic, key, payload) VALUES (?, ?, ?, ?)",
		int64(m.ID), m.Topic, m.Key, m.Payload).Error)
}

// RelayOutbox publishes up to limit unsent rows that need not wait for a
// turn (RelayIngest publishes the others), oldest first, and marks each
// one sent after its publish succeeds (publishClaimed). One statement
// claims the rows, skipping those another relay is claiming, so relays on
// several instances share the work without sending a row twice at once
// (the MQ is at-least-once anyway: a crash between publish and mark
// re-sends when the claim lapses, and the consume guard drops the
// duplicate).
func (s *Store) RelayOutbox(ctx context.Context, limit int, publish func(ctx context.Context, m service.OutboxMessage) (ref string, err error)) (sent, failed int, err error) {
	owner, publishBy := s.newClaim()
	var rows []relayRow
	if err := s.conn(ctx).Raw(`UPDATE outbox SET `+claimRows+` WHERE id IN (
			SELECT id FROM outbox WHERE sent_at IS NULL AND kb_id IS NULL AND `+unclaimed+`
			ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED)
		RETURNING id, topic, key, payload`, owner, s.lease().Milliseconds(), limit).Scan(&rows).Error; err != nil {
		return 0, 0, translate(err)
	}
	slices.SortFunc(rows, func(a, b relayRow) int { return cmp.Compare(a.ID, b.ID) })
	return s.publishClaimed(ctx, owner, publishBy, rows, publish)
}

// CheckSent asks holds whether the MQ still holds the messages of up to
// limit ingest rows sent (with a ref) before cutoff and not asked about
// since, whose document still waits for them (pending, same generation).
// A row whose message is gone (a Redis failover lost the acknowledged
// XADD) is made unsent again, so the relay publishes it again; rows whose
// document moved on were delivered and are confirmed, never asked about
// again. It returns how many rows it made unsent. A second delivery is
// harmless: the consume guard, the claim and the chunks' unique key drop it.
func (s *Store) CheckSent(ctx context.Context, cutoff time.Time, limit int, holds func(ctx context.Context, ref string) (bool, error)) (resent int, err error) {
	var askErr error
	const waiting = `EXISTS (SELECT 1 FROM documents d WHERE d.status = 'pending' AND d.deleted_at IS NULL
		AND o.key = d.id || ':' || d.generation)`
	if err := s.conn(ctx).Exec(`UPDATE outbox o SET confirmed_at = now()
		WHERE o.topic = ? AND o.sent_ref <> '' AND o.confirmed_at IS NULL AND NOT `+waiting,
		service.IngestTopic).Error; err != nil {
		return 0, translate(err)
	}
	err = s.WithinTx(ctx, func(tx *Store) error {
		var rows []struct {
			ID      int64
			SentRef string
		}
		if err := tx.db.Raw(`SELECT o.id, o.sent_ref FROM outbox o
			WHERE o.topic = ? AND o.sent_ref <> '' AND o.confirmed_at IS NULL AND o.sent_at < ?
				AND (o.checked_at IS NULL OR o.checked_at < ?) AND `+waiting+`
			ORDER BY o.checked_at NULLS FIRST, o.id LIMIT ? FOR UPDATE OF o SKIP LOCKED`,
			service.IngestTopic, cutoff, cutoff, limit).Scan(&rows).Error; err != nil {
			return translate(err)
		}
		for _, r := range rows {
			held, err := holds(ctx, r.SentRef)
			if err != nil {
				// The MQ is likely down: keep what was decided, ask the
				// rest next round.
				askErr = err
				break
			}
			q := "UPDATE outbox SET checked_at = now() WHERE id = ?"
			if !held {
				resent++
				// Its document keeps its place in flight: the row goes
				// out again at once, not at its knowledge base's turn.
				q = `UPDATE outbox SET sent_at = NULL, sent_ref = '', checked_at = NULL, attempts = attempts + 1, kb_id = NULL,
					last_error = 'the MQ lost the published message, a failover; sent again' WHERE id = ?`
			}
			if err := tx.db.Exec(q, r.ID).Error; err != nil {
				return translate(err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return resent, askErr
}

// PruneOutbox deletes up to limit rows sent before the cutoff and returns
// how many it deleted. Callers loop until fewer than limit come back: one
// short statement per batch, so a large backlog never holds long locks or
// one huge transaction. Unsent rows are never deleted, however old. Rows
// another transaction holds (a relay) are skipped until the next round.
func (s *Store) PruneOutbox(ctx context.Context, sentBefore time.Time, limit int) (int, error) {
	res := s.conn(ctx).Exec(`DELETE FROM outbox WHERE id IN (
		SELECT id FROM outbox WHERE sent_at < ? ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED)`, sentBefore, limit)
	if res.Error != nil {
		return 0, translate(res.Error)
	}
	return int(res.RowsAffected), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
