package repository

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/ragent-go/ragent/service"
)

// The relays publish with no transaction open (migration 0028): a short
// transaction claims the rows one relay sends, stamping them with its
// random token and a deadline; the publishes run outside it; a short
// statement per row then marks it sent, or releases the claim of a row
// whose publish failed and of those after it. A stalled MQ holds neither
// a lock nor a transaction, and the other instances' relays go on with
// the rows they claim. The rows of a relay that died mid-publish become
// claimable again when their claim lapses.

// relayLease is how long a relay's claim lasts. Its publishes get half of
// it, so a relay gives up on a stalled publish, and releases its claims,
// well before another relay may claim the same rows (a publish that
// outlives its context, or clocks apart by more than the other half,
// aside; the MQ is at-least-once anyway, and the consume guard drops a
// second delivery).
const relayLease = time.Minute

// relayMarkTimeout bounds each statement that marks a row sent or
// releases a claim. They run even when the relay's context ended (a
// shutdown) after its publish: a row published and not marked would go
// again when its claim lapsed.
const relayMarkTimeout = 10 * time.Second

// unclaimed is true of an outbox row no live claim holds.
const unclaimed = `(claimed_until IS NULL OR claimed_until <= now())`

// relayRow is an outbox row a relay claimed.
type relayRow struct {
	ID      int64
	Topic   string
	Key     string
	Payload []byte
}

func (r relayRow) message() service.OutboxMessage {
	return service.OutboxMessage{ID: service.ID(r.ID), Topic: r.Topic, Key: r.Key, Payload: r.Payload}
}

// lease is the relays' claim lease: relayLease unless a test shortened it.
func (s *Store) lease() time.Duration {
	if s.relayLease > 0 {
		return s.relayLease
	}
	return relayLease
}

// newClaim returns a relay's random claim token and when its publishes
// must end, taken before the claim so they end before it lapses.
func (s *Store) newClaim() (owner int64, publishBy time.Time) {
	return rand.Int64(), time.Now().Add(s.lease() / 2)
}

// claimRows is the assignment that claims a row for owner (the first
// parameter) until the lease (the second, in milliseconds) lapses.
const claimRows = `claimed_by = ?, claimed_until = now() + ? * interval '1 millisecond'`

// publishClaimed publishes rows, claimed by owner, in order with no
// transaction open, and marks each one sent after its publish succeeds:
// its ref (the MQ's name for the stored message, "" when it gives none)
// kept for CheckSent, and for an ingest row that waited for its turn its
// document's generation in flight, in the same statement, so the count in
// flight never drops between the claim and the mark. At the first failed
// publish (the MQ is likely down) it releases the claims left; the rest
// waits for the next round.
func (s *Store) publishClaimed(ctx context.Context, owner int64, publishBy time.Time, rows []relayRow,
	publish func(ctx context.Context, m service.OutboxMessage) (ref string, err error)) (sent, failed int, err error) {
	pctx, cancel := context.WithDeadline(ctx, publishBy)
	defer cancel()
	for _, r := range rows {
		m := r.message()
		ref, perr := publish(pctx, m)
		if perr != nil {
			return sent, 1, s.releaseClaims(ctx, owner, r.ID, perr)
		}
		if err := s.markSent(ctx, m, ref); err != nil {
			// The claims left lapse.
			return sent, 0, err
		}
		sent++
	}
	return sent, 0, nil
}

// markSent marks m's row sent and, when it waited for its knowledge
// base's turn, its document's generation in flight. A row another relay
// marked already (it claimed the row after this relay's claim lapsed) is
// left as it is.
func (s *Store) markSent(ctx context.Context, m service.OutboxMessage, ref string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayMarkTimeout)
	defer cancel()
	const sent = `UPDATE outbox SET sent_at = now(), sent_ref = ?, claimed_by = NULL, claimed_until = NULL
		WHERE id = ? AND sent_at IS NULL`
	doc, generation, ok := ingestKey(m)
	if !ok {
		return translate(s.conn(ctx).Exec(sent, ref, int64(m.ID)).Error)
	}
	// updated_at is the reaper's clock (RepublishPending): a document held
	// back for long is not re-published as soon as it is published.
	return translate(s.conn(ctx).Exec(`WITH o AS (`+sent+` RETURNING kb_id)
		UPDATE documents d SET sent_generation = ?, updated_at = now()
		FROM o WHERE o.kb_id IS NOT NULL AND d.id = ? AND d.generation = ?`,
		ref, int64(m.ID), generation, doc, generation).Error)
}

// releaseClaims records the failed publish of row failed and releases
// owner's claims on the rows it has not marked sent.
func (s *Store) releaseClaims(ctx context.Context, owner, failed int64, perr error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayMarkTimeout)
	defer cancel()
	return translate(s.conn(ctx).Exec(`UPDATE outbox SET claimed_by = NULL, claimed_until = NULL,
			attempts = attempts + CASE WHEN id = ? THEN 1 ELSE 0 END,
			last_error = CASE WHEN id = ? THEN ? ELSE last_error END
		WHERE claimed_by = ? AND sent_at IS NULL`, failed, failed, truncate(perr.Error(), 500), owner).Error)
}
