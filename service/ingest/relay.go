package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ragent-go/ragent/service"
)

func (s *Service) wakeRelay() { wake(s.kick) }

// RunRelay publishes outbox rows until ctx ends: at once after an upload on
// this instance or a document finished here, and every RelayInterval for
// rows written by other instances or left behind while the MQ was down.
// The ingest message of a new document generation goes out at its
// knowledge base's turn, with at most inFlightPerKB of the knowledge
// base's documents in flight (docs/ingestion.md "Fair shares"). A publish
// holds no lock or transaction: the store claims the rows first, so a
// stalled MQ stalls only this relay, and a failed publish releases them.
//
// With a Tracker it also asks, every ConfirmAfter, whether the queue still
// holds the ingest messages whose documents wait, and sends those it lost
// again (confirmSent).
func (s *Service) RunRelay(ctx context.Context, pub Publisher) error {
	t := time.NewTicker(s.cfg.RelayInterval)
	defer t.Stop()
	tracker, _ := pub.(Tracker)
	publish := func(ctx context.Context, m service.OutboxMessage) (string, error) {
		if tracker != nil && m.Topic == service.IngestTopic {
			return tracker.PublishTracked(ctx, m.Topic, m.Key, m.Payload)
		}
		return "", pub.Publish(ctx, m.Topic, m.Key, m.Payload)
	}
	var lastCheck time.Time
	for {
		if tracker != nil && s.now().Sub(lastCheck) >= s.cfg.ConfirmAfter/2 {
			lastCheck = s.now()
			s.confirmSent(ctx, tracker)
		}
		s.relayRound(ctx, "outbox", func(ctx context.Context, limit int) (int, int, error) {
			return s.store.RelayOutbox(ctx, limit, publish)
		})
		s.relayRound(ctx, "ingest", func(ctx context.Context, limit int) (int, int, error) {
			return s.store.RelayIngest(ctx, s.cfg.inFlightPerKB(), limit, publish)
		})
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.kick:
		}
	}
}

// relayRound publishes batches of relay until one comes back short or
// fails.
func (s *Service) relayRound(ctx context.Context, what string, relay func(ctx context.Context, limit int) (sent, failed int, err error)) {
	const batch = 100
	for {
		sent, failed, err := relay(ctx, batch)
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "outbox relay failed", "rows", what, "err", err)
		}
		if failed > 0 {
			s.log.WarnContext(ctx, "outbox publish failed; will retry", "rows", what, "sent", sent)
		}
		if err != nil || failed > 0 || sent < batch {
			return
		}
	}
}

// confirmSent sends again the ingest messages the queue lost although it
// acknowledged them: a Redis failover promotes a replica that never got the
// last XADDs. Each waiting document's message is asked about every
// ConfirmAfter until the document moves on, so a failover after one check
// is caught by the next.
func (s *Service) confirmSent(ctx context.Context, tracker Tracker) {
	const batch = 100
	holds := func(ctx context.Context, ref string) (bool, error) {
		return tracker.Holds(ctx, service.IngestTopic, ref)
	}
	resent, err := s.store.CheckSent(ctx, s.now().Add(-s.cfg.ConfirmAfter), batch, holds)
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "could not confirm published ingest messages", "err", err)
	}
	if resent > 0 {
		s.log.WarnContext(ctx, "the queue lost published ingest messages (a Redis failover?); sending them again", "messages", resent)
	}
}

// RunReaper re-queues documents stuck in running (their worker died with
// the message lost or dead-lettered) or in pending (the MQ lost their
// message) and prunes the sent outbox every ReaperInterval until ctx ends.
func (s *Service) RunReaper(ctx context.Context) error {
	t := time.NewTicker(s.cfg.ReaperInterval)
	defer t.Stop()
	for {
		if err := s.ReapOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "reaper failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ReapOnce re-queues the documents running since before RunningTimeout,
// re-publishes those pending since before PendingTimeout, deletes the outbox rows sent before OutboxRetention, and switches the
// re-embedded knowledge bases whose remaining documents were deleted.
func (s *Service) ReapOnce(ctx context.Context) error {
	// A failure of one does not hold back the other.
	return errors.Join(s.requeueStuck(ctx), s.republishPending(ctx), s.requeueSearch(ctx), s.pruneOutbox(ctx), s.finishReembeds(ctx))
}

// pruneOutbox deletes sent outbox rows older than the retention, one batch
// per statement until a batch comes back short. Every instance runs it; the
// batches skip rows another instance is deleting.
func (s *Service) pruneOutbox(ctx context.Context) error {
	cutoff := s.now().Add(-s.cfg.OutboxRetention)
	total := 0
	for ctx.Err() == nil {
		n, err := s.store.PruneOutbox(ctx, cutoff, s.cfg.PruneBatch)
		total += n
		if err != nil {
			return fmt.Errorf("prune outbox: %w", err)
		}
		if n < s.cfg.PruneBatch {
			break
		}
	}
	if total > 0 {
		s.log.InfoContext(ctx, "pruned the sent outbox", "rows", total, "sent_before", cutoff)
	}
	// Failed and skipped deliveries are the webhooks' dead letters, kept
	// for their own retention.
	doneCutoff := s.now().Add(-s.cfg.WebhookDeliveryRetention)
	for s.hooks != nil && ctx.Err() == nil {
		n, err := s.hooks.PruneDeliveries(ctx, cutoff, doneCutoff, s.cfg.PruneBatch)
		if err != nil {
			return fmt.Errorf("prune webhook deliveries: %w", err)
		}
		if n < s.cfg.PruneBatch {
			break
		}
	}
	return nil
}

func (s *Service) requeueStuck(ctx context.Context) error {
	stuck, err := s.store.StuckDocuments(ctx, s.now().Add(-s.cfg.RunningTimeout), 100)
	if err != nil {
		return err
	}
	for _, d := range stuck {
		msg, err := s.ingestMessage(d.ID, d.Generation)
		if err != nil {
			return err
		}
		ok, err := s.store.Requeue(ctx, d, msg)
		if err != nil {
			return err
		}
		if ok {
			s.log.WarnContext(ctx, "re-queued a stuck document", "document", d.ID, "generation", d.Generation, "attempts", d.Attempts)
			s.wakeRelay()
		}
	}
	return nil
}

// republishPending re-publishes documents pending for longer than
// PendingTimeout since their message left the outbox: the MQ has lost it
// (Redis restarted without its data) or holds it behind a long backlog. A
// second delivery is harmless: the consume guard drops the message of a
// generation already ingested, the claim one whose document moved on, and
// the chunks' unique key is the last line of defence. At most
// republishRound documents go per round, so a backlog longer than the bound
// grows by a bounded number of duplicates, not by itself.
func (s *Service) republishPending(ctx context.Context) error {
	const batch = 100
	total := 0
	for total < republishRound && ctx.Err() == nil {
		n, err := s.store.RepublishPending(ctx, s.now().Add(-s.cfg.PendingTimeout), batch, s.queue)
		total += n
		if err != nil {
			return fmt.Errorf("re-publish pending documents: %w", err)
		}
		if n < batch {
			break
		}
	}
	if total > 0 {
		s.log.WarnContext(ctx, "re-published documents pending too long; the MQ may have lost their messages",
			"documents", total, "pending_timeout", s.cfg.PendingTimeout)
		s.wakeRelay()
	}
	return nil
}

// republishRound caps the documents one reaper round re-publishes.
const republishRound = 1000
