package repository

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pgvector/pgvector-go"

	"github.com/ragent-go/ragent/service"
)

// searchIndex is the configuration of an external search engine's mirror.
type searchIndex struct {
	nextID  func() (service.ID, error) // ids of outbox rows
	vectors bool                       // the engine keeps the vectors too
	// noKeywords says the Postgres keyword index is not kept
	// (SkipKeywordIndex).
	noKeywords bool
}

// UseSearchIndex makes the store mirror chunk changes to an external search
// engine (RAGENT_SEARCH_BACKEND=opensearch): ReplaceChunks and
// DeleteDocument then queue a service.SearchIndexMessage in their
// transaction and mark the document's copy behind (search_pending_since),
// and ReplaceChunks leaves the document running until SearchIndexed says
// the engine holds its chunks (ingestion uses ReplaceIndexedChunks, which
// writes them to the engine itself). nextID numbers the outbox rows; vectors
// says the engine keeps the chunks' vectors (otherwise the chunks read for
// it come without them). Call it before the store is shared.
func (s *Store) UseSearchIndex(nextID func() (service.ID, error), vectors bool) {
	s.search = &searchIndex{nextID: nextID, vectors: vectors}
}

// SearchIndexMessage is the outbox row of a change to document docID's
// chunks at generation that removed the chunks removed; listed says
// removed is all of them (it is not for a re-queued message).
func SearchIndexMessage(id, docID service.ID, generation int, removed []int64, listed bool) (service.OutboxMessage, error) {
	msg := service.SearchIndexMessage{DocumentID: docID, Generation: generation, Listed: listed}
	for _, r := range removed {
		msg.Removed = append(msg.Removed, service.ID(r))
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return service.OutboxMessage{}, err
	}
	return service.OutboxMessage{ID: id, Topic: service.SearchIndexTopic,
		Key: fmt.Sprintf("%d:%d:search", docID, generation), Payload: body}, nil
}

// searchChanged marks document docID's search-engine copy behind, with
// set (extra "column = ?" assignments) and args applied in the same
// statement, and queues the message that brings the copy up to date and
// removes the chunks removed.
func (s *Store) searchChanged(docID int64, generation int, removed []int64, set string, args ...any) error {
	if set != "" {
		set += ", "
	}
	args = append(args, docID)
	if err := s.db.Exec(`UPDATE documents SET `+set+`search_pending_since = now(), updated_at = now() WHERE id = ?`, args...).Error; err != nil {
		return translate(err)
	}
	return s.enqueueSearch(docID, generation, removed, true)
}

// enqueueSearch queues the search-index message of a document.
func (s *Store) enqueueSearch(docID int64, generation int, removed []int64, listed bool) error {
	id, err := s.search.nextID()
	if err != nil {
		return err
	}
	m, err := SearchIndexMessage(id, service.ID(docID), generation, removed, listed)
	if err != nil {
		return err
	}
	return s.enqueue(m)
}

// searchKnowledgeBase marks the search-engine copies of a knowledge base's
// live documents behind and queues their messages: the knowledge base is
// being deleted (removed holds its chunks by document), or its vectors moved
// to another space, in this transaction.
func (s *Store) searchKnowledgeBase(kbID int64, removed map[int64][]int64) error {
	var rows []struct {
		ID         int64
		Generation int
	}
	if err := s.db.Raw(`UPDATE documents SET search_pending_since = now() WHERE kb_id = ? AND deleted_at IS NULL
		RETURNING id, generation`, kbID).Scan(&rows).Error; err != nil {
		return translate(err)
	}
	for _, r := range rows {
		if err := s.enqueueSearch(r.ID, r.Generation, removed[r.ID], true); err != nil {
			return err
		}
	}
	return nil
}

// DocumentSearchState reads a document's current chunks in one snapshot.
func (s *Store) DocumentSearchState(ctx context.Context, docID service.ID) (service.SearchState, error) {
	var st service.SearchState
	err := s.WithinTx(ctx, func(tx *Store) error {
		if err := tx.db.Exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY").Error; err != nil {
			return translate(err)
		}
		var rows []struct {
			Generation         int
			SearchPendingSince *time.Time
			Deleted            bool
		}
		if err := tx.db.Raw(`SELECT generation, search_pending_since, deleted_at IS NOT NULL AS deleted
			FROM documents WHERE id = ?`, int64(docID)).Scan(&rows).Error; err != nil {
			return translate(err)
		}
		if len(rows) == 0 {
			return nil
		}
		st.Generation, st.PendingSince, st.Live = rows[0].Generation, rows[0].SearchPendingSince, !rows[0].Deleted
		if !st.Live {
			return nil
		}
		var err error
		st.Chunks, err = tx.searchChunks("c.document_id = ?", "", int64(docID))
		return err
	})
	return st, err
}

// SearchChunkIDs returns the ids of the chunks DocumentSearchState would
// return now: the consumer's second read, which needs nothing else.
func (s *Store) SearchChunkIDs(ctx context.Context, docID service.ID) ([]service.ID, error) {
	var ids []int64
	if err := s.conn(ctx).Raw(`SELECT c.id FROM chunks c
		JOIN knowledge_bases kb ON kb.id = c.kb_id AND kb.deleted_at IS NULL
		JOIN documents d ON d.id = c.document_id AND d.deleted_at IS NULL
		WHERE c.document_id = ? AND c.enabled ORDER BY c.id`, int64(docID)).Scan(&ids).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.ID, len(ids))
	for i, id := range ids {
		out[i] = service.ID(id)
	}
	return out, nil
}

// searchChunks reads the chunks matching where, with their knowledge base
// alive, in id order, then applies limit (a LIMIT clause or "").
func (s *Store) searchChunks(where, limit string, args ...any) ([]service.Chunk, error) {
	var rows []struct {
		ID, DocumentID, KbID int64
		Generation           int
		Content, Section     string
		EmbeddingSpace       string
		Embedding            *pgvector.HalfVector
	}
	// Decoding a vector costs more than the rest of the row: only when the
	// engine keeps them (or the store is not told, ragent reindex-search).
	embedding := "c.embedding"
	if s.search != nil && !s.search.vectors {
		embedding = "NULL AS embedding"
	}
	if err := s.db.Raw(`SELECT c.id, c.document_id, c.kb_id, c.generation, c.content, c.section, c.embedding_space, `+embedding+` FROM chunks c
		JOIN knowledge_bases kb ON kb.id = c.kb_id AND kb.deleted_at IS NULL
		WHERE c.enabled AND `+where+` ORDER BY c.id `+limit, args...).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.Chunk, len(rows))
	for i, r := range rows {
		out[i] = service.Chunk{ID: service.ID(r.ID), DocumentID: service.ID(r.DocumentID), KnowledgeBaseID: service.ID(r.KbID),
			Generation: r.Generation, Content: r.Content, Section: r.Section}
		if r.Embedding != nil && r.EmbeddingSpace != "" {
			out[i].Embedding, out[i].EmbeddingSpace = r.Embedding.Slice(), r.EmbeddingSpace
		}
	}
	return out, nil
}

// ChunksAfter returns up to limit chunks with ids above after, in id
// order: ragent reindex-search's backfill.
func (s *Store) ChunksAfter(ctx context.Context, after service.ID, limit int) ([]service.Chunk, error) {
	return s.withConn(ctx).searchChunks("c.id > ?", "LIMIT ?", int64(after), limit)
}

// SearchIndexed records that the search engine holds the state
// DocumentSearchState returned with pendingSince: the copy is current
// unless a later change came since, and a running document whose chunks
// that state carried turns ready (with its webhook events).
func (s *Store) SearchIndexed(ctx context.Context, docID service.ID, generation int, pendingSince time.Time) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		res := tx.db.Exec(`UPDATE documents SET search_pending_since = NULL,
			status = CASE WHEN status = 'running' AND generation = ? AND started_at <= search_pending_since THEN 'ready' ELSE status END,
			updated_at = now()
			WHERE id = ? AND search_pending_since = ?`, generation, int64(docID), pendingSince)
		if res.Error != nil {
			return translate(res.Error)
		}
		if res.RowsAffected == 0 {
			return nil
		}
		return tx.documentEvent(int64(docID))
	})
}

// SearchFailed records that the search engine refused a document's state
// for good (a chunk too large for any bulk request): a running generation
// that state carried fails with reason, with its webhook events, and the
// copy no longer counts as behind, so the reaper does not queue it again.
func (s *Store) SearchFailed(ctx context.Context, docID service.ID, generation int, pendingSince time.Time, reason string) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		res := tx.db.Exec(`UPDATE documents SET search_pending_since = NULL,
			status = CASE WHEN status = 'running' AND generation = ? THEN 'failed' ELSE status END,
			error = CASE WHEN status = 'running' AND generation = ? THEN ? ELSE error END,
			updated_at = now()
			WHERE id = ? AND search_pending_since = ?`, generation, generation, reason, int64(docID), pendingSince)
		if res.Error != nil {
			return translate(res.Error)
		}
		if res.RowsAffected == 0 {
			return nil
		}
		return tx.documentEvent(int64(docID))
	})
}

// RequeueSearchIndex queues the search-index message again for up to limit
// documents whose search-engine copy has been behind since before cutoff
// (the engine was down until their message was dead-lettered, or a
// consumer died), and returns how many. Rows another instance is
// requeueing are skipped.
func (s *Store) RequeueSearchIndex(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if s.search == nil {
		return 0, nil
	}
	n := 0
	err := s.WithinTx(ctx, func(tx *Store) error {
		var rows []struct {
			ID         int64
			Generation int
		}
		if err := tx.db.Raw(`UPDATE documents SET search_pending_since = now() WHERE id IN (
				SELECT id FROM documents WHERE search_pending_since < ? ORDER BY search_pending_since LIMIT ?
				FOR UPDATE SKIP LOCKED)
			RETURNING id, generation`, cutoff, limit).Scan(&rows).Error; err != nil {
			return translate(err)
		}
		for _, r := range rows {
			// The removals of the lost message are found by the
			// consumer's search for the document's other chunks.
			if err := tx.enqueueSearch(r.ID, r.Generation, nil, false); err != nil {
				return err
			}
		}
		n = len(rows)
		return nil
	})
	return n, err
}

// ChunkResults fills in the rows of search hits found by an external
// engine, in their order, and drops the chunks Postgres does not have: a
// deleted document's, a generation's that a newer one replaced, whose
// removal from the engine is still on its way, or a new generation's not
// committed yet. Postgres is the source of truth, so a search never
// returns them. superseded says some hit was dropped because its document
// has committed a newer generation than the hit's, and the answer holds
// no newer one of it: the engine may have answered before that generation
// was searchable, and asked again it finds it (a replacement is searchable
// in the engine before it commits).
func (s *Store) ChunkResults(ctx context.Context, hits []service.SearchHit) (_ []service.SearchResult, superseded bool, _ error) {
	if len(hits) == 0 {
		return nil, false, nil
	}
	ids := make(intArray, len(hits))
	for i, h := range hits {
		ids[i] = int64(h.ChunkID)
	}
	var rows []struct {
		ID, DocumentID, KbID   int64
		Name, Content, Section string
	}
	db := s.conn(ctx)
	if err := db.Raw(`SELECT c.id, c.document_id, d.name, c.kb_id, c.content, c.section
		FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY(?) AND c.enabled`, ids).Scan(&rows).Error; err != nil {
		return nil, false, translate(err)
	}
	byID := make(map[int64]int, len(rows))
	for i, r := range rows {
		byID[r.ID] = i
	}
	out := make([]service.SearchResult, 0, len(rows))
	kept := map[service.ID]int{} // the newest generation kept of each document
	for _, h := range hits {
		i, ok := byID[int64(h.ChunkID)]
		if !ok {
			continue
		}
		r := rows[i]
		out = append(out, service.SearchResult{ChunkID: h.ChunkID, DocumentID: service.ID(r.DocumentID), DocumentName: r.Name,
			KnowledgeBaseID: service.ID(r.KbID), Content: r.Content, Section: r.Section, Score: h.Score})
		kept[h.DocumentID] = max(kept[h.DocumentID], h.Generation)
	}
	// A dropped hit of a document the answer also holds in a newer
	// generation came after that generation was searchable: asked again,
	// the engine would answer the same.
	var goneDocs, goneGens intArray
	for _, h := range hits {
		if _, ok := byID[int64(h.ChunkID)]; !ok && h.DocumentID != 0 && kept[h.DocumentID] <= h.Generation {
			goneDocs, goneGens = append(goneDocs, int64(h.DocumentID)), append(goneGens, int64(h.Generation))
		}
	}
	if len(goneDocs) == 0 {
		return out, false, nil
	}
	if err := db.Raw(`SELECT EXISTS (SELECT 1 FROM unnest(?::int8[], ?::int8[]) AS h(doc, gen)
		JOIN chunks c ON c.document_id = h.doc AND c.generation > h.gen)`, goneDocs, goneGens).Scan(&superseded).Error; err != nil {
		return nil, false, translate(err)
	}
	return out, superseded, nil
}

// ExistingChunks reports which of ids Postgres still has.
func (s *Store) ExistingChunks(ctx context.Context, ids []service.ID) (map[service.ID]bool, error) {
	arr := make(intArray, len(ids))
	for i, id := range ids {
		arr[i] = int64(id)
	}
	var found []int64
	if err := s.conn(ctx).Raw("SELECT id FROM chunks WHERE id = ANY(?) AND enabled", arr).Scan(&found).Error; err != nil {
		return nil, translate(err)
	}
	out := make(map[service.ID]bool, len(found))
	for _, id := range found {
		out[service.ID(id)] = true
	}
	return out, nil
}
