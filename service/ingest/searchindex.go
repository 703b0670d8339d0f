package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// SearchIndex is an external search engine that holds a copy of the
// chunks' keyword terms (RAGENT_SEARCH_BACKEND=opensearch).
type SearchIndex interface {
	// Index writes chunks, overwriting earlier copies; they are searchable
	// when it returns.
	Index(ctx context.Context, docs []service.SearchDoc) error
	// DeleteDocument removes the document's chunks except keep.
	DeleteDocument(ctx context.Context, docID service.ID, keep []service.ID) error
}

// SearchIndexStore reads what the engine should hold and records what it
// holds.
type SearchIndexStore interface {
	DocumentSearchState(ctx context.Context, docID service.ID) (service.SearchState, error)
	SearchIndexed(ctx context.Context, docID service.ID, generation int, pendingSince time.Time) error
	RequeueSearchIndex(ctx context.Context, cutoff time.Time, limit int) (int, error)
}

// searchIndex is the engine and its store, when one is enabled.
type searchIndex struct {
	store SearchIndexStore
	index SearchIndex
}

// EnableSearchIndex mirrors chunk changes to an external search engine:
// ProcessSearchIndex consumes the messages the store queues (see
// repository.Store.UseSearchIndex) and the reaper queues them again for
// documents whose copy stays behind. Call it before the service is used.
func (s *Service) EnableSearchIndex(store SearchIndexStore, index SearchIndex) {
	s.search = &searchIndex{store: store, index: index}
}

// ProcessSearchIndex brings the engine's copy of one document in line with
// Postgres: the search-index consumer's handler. The message only names
// the document; the chunks are read from Postgres, so a repeated, late or
// reordered message is harmless. It writes the document's current chunks,
// then removes every other chunk of the document from the engine, judged
// by a second read: a consumer holding an older state may have written its
// chunks after a newer state was mirrored, and this removal (after its own
// write) takes them out again. The document turns ready when the state
// written is still the latest. An engine that does not answer is an error,
// so the message is redelivered; after the MQ gives up, the reaper queues
// it again (RequeueSearchIndex).
func (s *Service) ProcessSearchIndex(ctx context.Context, body []byte) error {
	var msg service.SearchIndexMessage
	if err := json.Unmarshal(body, &msg); err != nil || msg.DocumentID == 0 {
		s.log.ErrorContext(ctx, "dropping malformed search-index message", "body", string(body), "err", err)
		return fmt.Errorf("%w: malformed search-index message", ErrGaveUp)
	}
	if s.search == nil {
		return fmt.Errorf("%w: no search engine is configured", ErrGaveUp)
	}
	st, err := s.search.store.DocumentSearchState(ctx, msg.DocumentID)
	if err != nil {
		return err
	}
	if err := s.search.index.Index(ctx, SearchDocs(st.Chunks)); err != nil {
		return err
	}
	now, err := s.search.store.DocumentSearchState(ctx, msg.DocumentID)
	if err != nil {
		return err
	}
	keep := make([]service.ID, len(now.Chunks))
	for i, c := range now.Chunks {
		keep[i] = c.ID
	}
	if err := s.search.index.DeleteDocument(ctx, msg.DocumentID, keep); err != nil {
		return err
	}
	if st.PendingSince == nil {
		return nil
	}
	return s.search.store.SearchIndexed(ctx, msg.DocumentID, st.Generation, *st.PendingSince)
}

// SearchDocs turns chunks read from Postgres into the engine's documents:
// their terms are what the Postgres keyword index holds (IndexTerms's),
// in order with duplicates, for the engine's whitespace analyzer, and
// their vector with its space.
func SearchDocs(chunks []service.Chunk) []service.SearchDoc {
	docs := make([]service.SearchDoc, len(chunks))
	for i, c := range chunks {
		docs[i] = service.SearchDoc{ChunkID: c.ID, DocumentID: c.DocumentID, KnowledgeBaseID: c.KnowledgeBaseID,
			Generation: c.Generation, Terms: text.Tokenize(indexText(Chunk{Content: c.Content, Section: c.Section})),
			Space: c.EmbeddingSpace, Vector: c.Embedding}
	}
	return docs
}

// requeueSearch queues the search-index message again for documents whose
// engine copy has been behind for RunningTimeout.
func (s *Service) requeueSearch(ctx context.Context) error {
	if s.search == nil {
		return nil
	}
	n, err := s.search.store.RequeueSearchIndex(ctx, s.now().Add(-s.cfg.RunningTimeout), 100)
	if n > 0 {
		s.log.WarnContext(ctx, "re-queued documents the search engine had not taken", "documents", n)
		s.wakeRelay()
	}
	return err
}
