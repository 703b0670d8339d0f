package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest/parse"
	"github.com/ragent-go/ragent/text"
)

// SearchIndex is an external search engine that holds a copy of the
// chunks' keyword terms (RAGENT_SEARCH_BACKEND=opensearch).
type SearchIndex interface {
	// Index writes chunks, overwriting earlier copies; they are indexed
	// when it returns and searchable within the engine's refresh
	// interval. An error wrapping service.ErrPermanent says the engine
	// refuses them for good.
	Index(ctx context.Context, docs []service.SearchDoc) error
	// IndexSearchable is Index, returning once the chunks are searchable.
	IndexSearchable(ctx context.Context, docs []service.SearchDoc) error
	// DeleteChunks removes chunks by id, however recently written.
	DeleteChunks(ctx context.Context, ids []service.ID) error
	// DeleteDocument removes the document's chunks except keep, those
	// searchable yet.
	DeleteDocument(ctx context.Context, docID service.ID, keep []service.ID) error
}

// SearchIndexStore reads what the engine should hold and records what it
// holds.
type SearchIndexStore interface {
	DocumentSearchState(ctx context.Context, docID service.ID) (service.SearchState, error)
	// SearchChunkIDs is the ids of the chunks DocumentSearchState returns.
	SearchChunkIDs(ctx context.Context, docID service.ID) ([]service.ID, error)
	// ReplaceIndexedChunks is Store.ReplaceChunks with the chunks written
	// to the engine by index in the transaction (see
	// repository.Store.ReplaceIndexedChunks).
	ReplaceIndexedChunks(ctx context.Context, docID service.ID, generation int, space string, chunks []service.Chunk,
		index func(ctx context.Context, visible, vectors bool) error) error
	SearchIndexed(ctx context.Context, docID service.ID, generation int, pendingSince time.Time) error
	SearchFailed(ctx context.Context, docID service.ID, generation int, pendingSince time.Time, reason string) error
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
// the document and the chunks its change removed; the current chunks are
// read from Postgres, so a repeated, late or reordered message is
// harmless. It writes the document's current chunks, then removes by id
// the chunks the change removed and those it wrote itself that a second
// read no longer finds: a consumer holding an older state may have written
// its chunks after a newer state was mirrored, and this removal (after its
// own write) takes them out again. A message that does not list the
// removed chunks (a re-queued one) searches the engine for every other
// chunk of the document instead. The document turns ready when the state
// written is still the latest: its chunks are committed and indexed, and
// searchable at the engine's next refresh. An engine that does not answer
// is an error, so the message is redelivered; after the MQ gives up, the
// reaper queues it again (RequeueSearchIndex). A chunk the engine refuses
// for good fails the document.
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
		if !errors.Is(err, service.ErrPermanent) {
			return err
		}
		s.log.ErrorContext(ctx, "the search engine refused a document", "document", msg.DocumentID, "generation", st.Generation, "err", err)
		if st.PendingSince != nil {
			reason := "the search engine refused the document's chunks: " + err.Error()
			if err := s.search.store.SearchFailed(ctx, msg.DocumentID, st.Generation, *st.PendingSince, reason); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: %v", ErrGaveUp, err)
	}
	keepIDs, err := s.search.store.SearchChunkIDs(ctx, msg.DocumentID)
	if err != nil {
		return err
	}
	keep := make(map[service.ID]bool, len(keepIDs))
	for _, id := range keepIDs {
		keep[id] = true
	}
	var stale []service.ID
	for _, id := range msg.Removed {
		if !keep[id] {
			stale = append(stale, id)
		}
	}
	for _, c := range st.Chunks {
		if !keep[c.ID] {
			stale = append(stale, c.ID)
		}
	}
	if err := s.search.index.DeleteChunks(ctx, stale); err != nil {
		return err
	}
	if !msg.Listed {
		if err := s.search.index.DeleteDocument(ctx, msg.DocumentID, keepIDs); err != nil {
			return err
		}
	}
	if st.PendingSince == nil {
		return nil
	}
	return s.search.store.SearchIndexed(ctx, msg.DocumentID, st.Generation, *st.PendingSince)
}

// commitIndexed commits a generation's chunks and writes them to the
// search engine in the commit's path (ReplaceIndexedChunks): the document
// is ready at the commit, committed and indexed, and searchable at the
// engine's next refresh; a replacement's chunks are searchable before the
// commit that removes the old ones, so a search finds the old version until
// the commit and the new one from it, never neither. If the commit fails
// after the write, the chunks are removed from the engine again.
func (s *Service) commitIndexed(ctx context.Context, doc *service.Document, chunks []service.Chunk) error {
	space := s.cfg.Space.Key()
	written := false
	err := s.search.store.ReplaceIndexedChunks(ctx, doc.ID, doc.Generation, space, chunks, func(ctx context.Context, visible, vectors bool) error {
		stored := make([]service.Chunk, len(chunks))
		for i, c := range chunks {
			if vectors {
				c.EmbeddingSpace = space
			} else {
				c.Embedding = nil
			}
			stored[i] = c
		}
		written = true
		if visible {
			return s.search.index.IndexSearchable(ctx, SearchDocs(stored))
		}
		return s.search.index.Index(ctx, SearchDocs(stored))
	})
	if err != nil && written {
		// Never returned meanwhile (Postgres does not have them); a chunk
		// left behind when this fails too is swept by ragent
		// reindex-search.
		ids := make([]service.ID, len(chunks))
		for i, c := range chunks {
			ids[i] = c.ID
		}
		if derr := s.search.index.DeleteChunks(context.WithoutCancel(ctx), ids); derr != nil {
			s.log.WarnContext(ctx, "could not remove the chunks of an uncommitted generation from the search engine",
				"document", doc.ID, "generation", doc.Generation, "err", derr)
		}
	}
	return err
}

// SearchDocs turns chunks read from Postgres into the engine's documents:
// their terms are what the Postgres keyword index holds (IndexTerms's),
// in order with duplicates, for the engine's whitespace analyzer, and
// their vector with its space.
func SearchDocs(chunks []service.Chunk) []service.SearchDoc {
	docs := make([]service.SearchDoc, len(chunks))
	for i, c := range chunks {
		docs[i] = service.SearchDoc{ChunkID: c.ID, DocumentID: c.DocumentID, KnowledgeBaseID: c.KnowledgeBaseID,
			Generation: c.Generation, Terms: text.Tokenize(indexText(parse.Chunk{Content: c.Content, Section: c.Section})),
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
