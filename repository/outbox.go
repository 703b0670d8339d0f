package repository

import (
	"context"
	"time"

	"github.com/ragent-go/ragent/service"
)

// enqueue adds an outbox row in the receiver's transaction.
func (s *Store) enqueue(m service.OutboxMessage) error {
	return translate(s.db.Exec("INSERT INTO outbox (id, topic, key, payload) VALUES (?, ?, ?, ?)",
		int64(m.ID), m.Topic, m.Key, m.Payload).Error)
}

// RelayOutbox publishes up to limit unsent rows, oldest first, and marks
// each one sent after its publish succeeds. The rows are locked with SKIP
// LOCKED, so relays on several instances share the work without sending a
// row twice at once (the MQ is at-least-once anyway: a crash between publish
// and commit re-sends, and the consume guard drops the duplicate).
func (s *Store) RelayOutbox(ctx context.Context, limit int, publish func(ctx context.Context, m service.OutboxMessage) error) (sent, failed int, err error) {
	err = s.WithinTx(ctx, func(tx *Store) error {
		var rows []struct {
			ID      int64
			Topic   string
			Key     string
			Payload []byte
		}
		if err := tx.db.Raw(`SELECT id, topic, key, payload FROM outbox WHERE sent_at IS NULL
			ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`, limit).Scan(&rows).Error; err != nil {
			return translate(err)
		}
		for _, r := range rows {
			perr := publish(ctx, service.OutboxMessage{ID: service.ID(r.ID), Topic: r.Topic, Key: r.Key, Payload: r.Payload})
			if perr != nil {
				failed++
				if err := tx.db.Exec("UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
					truncate(perr.Error(), 500), r.ID).Error; err != nil {
					return translate(err)
				}
				// The MQ is likely down: stop here, the rest waits for the next round.
				break
			}
			sent++
			if err := tx.db.Exec("UPDATE outbox SET sent_at = now() WHERE id = ?", r.ID).Error; err != nil {
				return translate(err)
			}
		}
		return nil
	})
	return sent, failed, err
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
