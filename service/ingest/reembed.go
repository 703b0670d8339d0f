package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ragent-go/ragent/service"
)

// The embedding space is part of a knowledge base's identity (docs/embeddings.md
// "Embedding model changes"). When the configured space differs from a
// knowledge base's recorded one, PlanReembed (at start, once for all
// instances) makes it move: one ingest message per document with chunks
// re-embeds that document's chunks into the new space beside the old
// vectors, and when the last document is done its vectors are switched in
// one transaction. Search keeps using the recorded space until then, so two
// spaces are never mixed. Progress is per document and stored with its
// vectors, so a crash loses at most the document in hand, and a repeated
// message finds its document done.

// ReembedStore is what re-embedding needs from storage.
type ReembedStore interface {
	PlanReembed(ctx context.Context, target service.EmbeddingSpace,
		msg func(doc *service.Document) (service.OutboxMessage, error)) ([]service.ID, error)
	ReembedChunks(ctx context.Context, docID service.ID, space string) ([]service.Chunk, error)
	StoreReembedded(ctx context.Context, docID service.ID, space string, chunks []service.Chunk) error
	FinishReembed(ctx context.Context, kbID service.ID, space string) (bool, error)
	Reembedding(ctx context.Context) (map[service.ID]string, error)
}

// PlanReembed moves every knowledge base whose recorded embedding space is
// not the configured one to it, in the background through the MQ. It is
// idempotent: knowledge bases already moving to the configured space keep
// their progress. Call it under the startup lock, so instances started
// together plan once.
func (s *Service) PlanReembed(ctx context.Context) error {
	target := s.cfg.Space
	moving, err := s.store.PlanReembed(ctx, target, func(d *service.Document) (service.OutboxMessage, error) {
		return s.reembedMessage(d.ID, d.Generation, target.Key())
	})
	if err != nil {
		return fmt.Errorf("plan re-embedding into %s: %w", target, err)
	}
	for _, kb := range moving {
		// A knowledge base without chunks switches at once.
		if done, err := s.finishReembed(ctx, kb, target.Key()); err != nil || done {
			continue
		}
		s.log.InfoContext(ctx, "re-embedding a knowledge base in the background", "knowledge_base", kb, "into", target.String())
	}
	s.wakeRelay()
	return nil
}

func (s *Service) reembedMessage(docID service.ID, generation int, space string) (service.OutboxMessage, error) {
	id, err := s.ids.NextID()
	if err != nil {
		return service.OutboxMessage{}, err
	}
	body, err := json.Marshal(service.IngestMessage{DocumentID: docID, Generation: generation, Reembed: space})
	if err != nil {
		return service.OutboxMessage{}, err
	}
	key := fmt.Sprintf("%d:%d:reembed:%s", docID, generation, space)
	return service.OutboxMessage{ID: id, Topic: service.IngestTopic, Key: key, Payload: body}, nil
}

// reembed re-embeds one document's chunks into the space msg names. A
// document that is gone or done, and a knowledge base that no longer moves
// there, make the message stale: it is acknowledged and dropped.
func (s *Service) reembed(ctx context.Context, msg service.IngestMessage) error {
	log := s.log.With("document", msg.DocumentID, "space", msg.Reembed)
	if msg.Reembed != s.cfg.Space.Key() {
		// Another instance, configured with another model, planned it:
		// this one cannot make vectors of that space.
		log.ErrorContext(ctx, "dropping a re-embedding message for a space this instance does not embed", "configured", s.cfg.Space.String())
		return fmt.Errorf("%w: re-embedding into space %s, but this worker embeds %s", ErrGaveUp, msg.Reembed, s.cfg.Space)
	}
	doc, err := s.store.Document(ctx, msg.DocumentID)
	if errors.Is(err, service.ErrNotFound) {
		log.InfoContext(ctx, "skipping re-embedding of a deleted document")
		return nil
	}
	if err != nil {
		return err
	}
	chunks, err := s.store.ReembedChunks(ctx, doc.ID, msg.Reembed)
	if err != nil {
		return err
	}
	if len(chunks) > 0 {
		texts := make([]string, len(chunks))
		for i, c := range chunks {
			texts[i] = c.Content
		}
		ectx := service.WithUsageScope(ctx, service.UsageScope{UserID: doc.CreatedBy, KnowledgeBaseID: doc.KnowledgeBaseID})
		if err := s.embedChunks(ectx, fmt.Sprintf("reembed:%s:%s", doc.ID, msg.Reembed), chunks, texts); err != nil {
			return err
		}
		err = s.store.StoreReembedded(ctx, doc.ID, msg.Reembed, chunks)
		switch {
		case errors.Is(err, service.ErrNotFound):
			log.InfoContext(ctx, "document re-indexed during re-embedding; its new chunks are in the new space already")
		case err != nil && s.moving(ctx, doc.KnowledgeBaseID, msg.Reembed):
			return err
		case err != nil:
			log.InfoContext(ctx, "knowledge base no longer re-embedded into this space; message dropped", "err", err)
			return nil
		default:
			log.DebugContext(ctx, "document re-embedded", "chunks", len(chunks))
		}
	}
	_, err = s.finishReembed(ctx, doc.KnowledgeBaseID, msg.Reembed)
	return err
}

// moving reports whether a knowledge base is still moving to space (true
// when that cannot be read, so the caller retries rather than drops).
func (s *Service) moving(ctx context.Context, kbID service.ID, space string) bool {
	kbs, err := s.store.KnowledgeBaseSettings(ctx, []service.ID{kbID})
	if err != nil {
		return true
	}
	return len(kbs) == 1 && kbs[0].Reembedding != nil && kbs[0].Reembedding.Target.Key() == space
}

// finishReembed switches a knowledge base to space if every document is done.
func (s *Service) finishReembed(ctx context.Context, kbID service.ID, space string) (bool, error) {
	done, err := s.store.FinishReembed(ctx, kbID, space)
	if err != nil {
		return false, fmt.Errorf("finish re-embedding knowledge base %s: %w", kbID, err)
	}
	if done {
		s.log.InfoContext(ctx, "knowledge base re-embedded; search uses the new space", "knowledge_base", kbID, "space", space)
	}
	return done, nil
}

// finishReembeds switches the knowledge bases whose last documents were
// deleted rather than re-embedded (no message is left to switch them).
func (s *Service) finishReembeds(ctx context.Context) error {
	moving, err := s.store.Reembedding(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for kb, space := range moving {
		if _, err := s.finishReembed(ctx, kb, space); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
