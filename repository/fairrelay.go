package repository

import (
	"context"
	"strconv"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// Ingestion's fair relay (docs/ingestion.md "Fair shares", migration
// 0027, claims 0028): the ingest message of a document generation not yet published
// waits in the outbox until its knowledge base has fewer than a bound of
// documents in flight (published, not yet finished), and knowledge bases,
// and the uploaders within one, take turns.

// ingestRelayLock is the advisory lock one ingest relay holds at a time
// across instances ("igrl"), so the count of a knowledge base's documents
// in flight is not read by two relays that both publish up to the bound.
const ingestRelayLock = 0x6967726c

// ingestKey parses an ingest message's key, "<document>:<generation>"; a
// re-embedding's key (more parts) and any other is not one.
func ingestKey(m service.OutboxMessage) (doc int64, generation int, ok bool) {
	if m.Topic != service.IngestTopic {
		return 0, 0, false
	}
	d, g, found := strings.Cut(m.Key, ":")
	if !found {
		return 0, 0, false
	}
	doc, err := strconv.ParseInt(d, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	generation, err = strconv.Atoi(g)
	if err != nil {
		return 0, 0, false
	}
	return doc, generation, true
}

// enqueueTurn writes m as a row that waits for its knowledge base's turn
// when it is the ingest message of its document's current generation and
// that generation was not published yet. A generation already in flight
// (a stuck document re-queued, a pending one re-published) keeps its
// place: its row goes out at once, and publishing it does not add to the
// count in flight. It reports whether it wrote the row.
func (s *Store) enqueueTurn(m service.OutboxMessage) (bool, error) {
	doc, generation, ok := ingestKey(m)
	if !ok {
		return false, nil
	}
	res := s.db.Exec(`INSERT INTO outbox (id, topic, key, payload, kb_id, uploader)
		SELECT ?, ?, ?, ?, d.kb_id, coalesce(d.created_by, 0) FROM documents d
		WHERE d.id = ? AND d.generation = ? AND d.sent_generation IS DISTINCT FROM d.generation`,
		int64(m.ID), m.Topic, m.Key, m.Payload, doc, generation)
	if res.Error != nil {
		return false, translate(res.Error)
	}
	return res.RowsAffected == 1, nil
}

// RelayIngest publishes up to limit of the ingest rows waiting for their
// turn, and marks each one sent, and its document's generation in flight,
// after its publish succeeds. A knowledge base gets no more than perKB
// documents in flight, counted across every instance: one relay claims
// rows at a time (an advisory lock held by the claim's short transaction,
// not by the publishes, see publishClaimed) and counts the rows other
// relays claimed as in flight. Within the bound, knowledge bases take
// turns, and within one its uploaders, each oldest first.
func (s *Store) RelayIngest(ctx context.Context, perKB, limit int, publish func(ctx context.Context, m service.OutboxMessage) (ref string, err error)) (sent, failed int, err error) {
	owner, publishBy := s.newClaim()
	var rows []relayRow
	err = s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SELECT pg_advisory_xact_lock(?)", ingestRelayLock).Error; err != nil {
			return translate(err)
		}
		if err := tx.db.Raw(fairTurnsQuery, perKB, perKB, limit).Scan(&rows).Error; err != nil {
			return translate(err)
		}
		if len(rows) == 0 {
			return nil
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		return translate(tx.db.Exec("UPDATE outbox SET "+claimRows+" WHERE id IN ?", owner, s.lease().Milliseconds(), ids).Error)
	})
	if err != nil || len(rows) == 0 {
		return 0, 0, err
	}
	return s.publishClaimed(ctx, owner, publishBy, rows, publish)
}

// fairTurnsQuery picks the rows RelayIngest publishes: for each knowledge
// base and uploader with unclaimed rows waiting, the first perKB of them, oldest
// first (turn); within a knowledge base the uploader with the fewest
// documents in flight first, so uploaders take turns across rounds too
// (place: documents in flight plus turn, the older row among equals); as many as the knowledge base has
// room for below perKB in flight; across knowledge bases the first places
// first. A row another relay claimed and has not marked sent yet counts as
// its document in flight.
const fairTurnsQuery = `
WITH busy AS (
	SELECT kb_id, uploader, sum(n) AS n FROM (
		SELECT kb_id, coalesce(created_by, 0) AS uploader, count(*) AS n FROM documents
		WHERE status IN ('pending', 'running') AND deleted_at IS NULL AND sent_generation = generation
		GROUP BY kb_id, coalesce(created_by, 0)
		UNION ALL
		SELECT kb_id, uploader, count(*) FROM outbox
		WHERE sent_at IS NULL AND kb_id IS NOT NULL AND claimed_until > now()
		GROUP BY kb_id, uploader) c
	GROUP BY kb_id, uploader
), lanes AS (
	SELECT l.kb_id, l.uploader, coalesce(b.n, 0) AS in_flight
	FROM (SELECT DISTINCT kb_id, uploader FROM outbox WHERE sent_at IS NULL AND kb_id IS NOT NULL AND ` + unclaimed + `) l
	LEFT JOIN busy b ON b.kb_id = l.kb_id AND b.uploader = l.uploader
), heads AS (
	SELECT h.*, row_number() OVER (PARTITION BY h.kb_id ORDER BY h.in_flight + h.turn, h.id) AS place
	FROM lanes l CROSS JOIN LATERAL (
		SELECT o.id, o.topic, o.key, o.payload, o.kb_id, o.uploader, l.in_flight,
			row_number() OVER (ORDER BY o.id) AS turn
		FROM outbox o WHERE o.sent_at IS NULL AND o.kb_id = l.kb_id AND o.uploader = l.uploader AND ` + unclaimed + `
		ORDER BY o.id LIMIT ?) h
)
SELECT h.id, h.topic, h.key, h.payload FROM heads h
	LEFT JOIN (SELECT kb_id, sum(n) AS n FROM busy GROUP BY kb_id) k ON k.kb_id = h.kb_id
WHERE h.place <= ? - coalesce(k.n, 0)
ORDER BY h.place, h.kb_id
LIMIT ?`
