package repository

import (
	"context"
	"fmt"
	"time"

	"github.com/pgvector/pgvector-go"

	"github.com/ragent-go/ragent/service"
)

// Chunk curation (README "Curating chunks"). A change of one chunk runs in
// one transaction that holds its document's row lock and then its own, so
// the changes of a chunk (and a reindex of its document, which takes the
// document's lock first too) are serialized: revisions are numbered
// without gaps, and whatever the caller mirrors to the search engine under
// the lock reaches it in the order of the commits.

// curatedRow is a chunk as curation reads it under its lock.
type curatedRow struct {
	ID, DocumentID, KbID int64
	Generation, Ordinal  int
	Content, Section     string
	TokenCount           int
	TermCount            int64
	Enabled, Manual      bool
	Revision             int
	EmbeddingSpace       string
	Embedding            *pgvector.HalfVector
}

// chunk is the row as a chunk, with its vector when it has one in its
// knowledge base's recorded space (the search engine's copy needs it).
func (r curatedRow) chunk() *service.Chunk {
	c := &service.Chunk{ID: service.ID(r.ID), DocumentID: service.ID(r.DocumentID), KnowledgeBaseID: service.ID(r.KbID),
		Generation: r.Generation, Ordinal: r.Ordinal, Content: r.Content, Section: r.Section, TokenCount: r.TokenCount,
		Enabled: r.Enabled, Manual: r.Manual, Revision: r.Revision}
	if r.Embedding != nil && r.EmbeddingSpace != "" {
		c.Embedding, c.EmbeddingSpace = r.Embedding.Slice(), r.EmbeddingSpace
	}
	return c
}

const curatedColumns = `id, document_id, kb_id, generation, ordinal, content, section, token_count, term_count, enabled, manual,
	revision, embedding_space, embedding`

// CurateChunk changes one chunk of the knowledge bases kbIDs: under the
// document's and the chunk's row locks it calls change with the chunk's
// current state, writes the change change returns (content, vector and
// keyword postings, enabled, or the deletion) and its revision, and
// commits. change runs under the locks so that what it mirrors elsewhere
// (the search engine's copy) is in commit order; an error from it rolls
// everything back. It returns the chunk after the change (nil when
// deleted) and the revision. A chunk not in kbIDs is service.ErrNotFound.
func (s *Store) CurateChunk(ctx context.Context, id service.ID, kbIDs []service.ID,
	change func(cur *service.Chunk) (service.ChunkChange, error)) (*service.Chunk, *service.ChunkRevision, error) {
	var (
		after *service.Chunk
		rev   *service.ChunkRevision
	)
	err := s.WithinTx(ctx, func(tx *Store) error {
		doc, err := tx.lockLiveDocument(service.ErrNotFound,
			`SELECT document_id FROM chunks WHERE id = ? AND kb_id = ANY(?)`, int64(id), idArray(kbIDs))
		if err != nil {
			return err
		}
		var rows []curatedRow
		if err := tx.db.Raw(`SELECT `+curatedColumns+` FROM chunks WHERE id = ? FOR UPDATE`, int64(id)).Scan(&rows).Error; err != nil {
			return translate(err)
		}
		if len(rows) == 0 {
			return service.ErrNotFound // removed by a reindex that committed first
		}
		cur := rows[0]
		ch, err := change(cur.chunk())
		if err != nil {
			return err
		}
		before := cur.chunk()
		if ch.Delete {
			if err := tx.db.Exec(`DELETE FROM chunks WHERE id = ?`, cur.ID).Error; err != nil {
				return translate(err)
			}
			if cur.Enabled {
				if err := tx.unindexChunks(cur.KbID, intArray{cur.ID}, 1, cur.TermCount); err != nil {
					return err
				}
			}
			if err := tx.db.Exec(`UPDATE documents SET chunk_count = greatest(chunk_count - 1, 0) WHERE id = ?`, doc.ID).Error; err != nil {
				return translate(err)
			}
		} else {
			if after, err = tx.applyChange(doc, cur, ch); err != nil {
				return err
			}
		}
		rev, err = tx.recordRevision(doc, before, after, ch)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return after, rev, nil
}

// lockLiveDocument locks the row of the live document that query (a SELECT
// of a document id, with args) finds for the rest of the transaction;
// notFound when it finds none.
func (s *Store) lockLiveDocument(notFound error, query string, args ...any) (*documentRow, error) {
	var ids []int64
	if err := s.db.Raw(query, args...).Scan(&ids).Error; err != nil {
		return nil, translate(err)
	}
	if len(ids) == 0 {
		return nil, notFound
	}
	var doc documentRow
	if err := s.db.Clauses(lockForUpdate).Take(&doc, ids[0]).Error; err != nil {
		return nil, translate(err)
	}
	return &doc, nil
}

// applyChange writes a chunk's new content and enabled state: its keyword
// postings follow (a disabled chunk has none), and a new content takes its
// new vector, as the chunk's vector or, while the knowledge base is being
// re-embedded into the vector's space, as its next one (keyword search
// finds it meanwhile, as a chunk ingested during a re-embedding).
func (s *Store) applyChange(doc *documentRow, cur curatedRow, ch service.ChunkChange) (*service.Chunk, error) {
	edited := ch.Embedding != nil
	if cur.Enabled && (!ch.Enabled || edited) {
		if err := s.unindexChunks(cur.KbID, intArray{cur.ID}, 1, cur.TermCount); err != nil {
			return nil, err
		}
	}
	if edited {
		next, err := s.spaceRole(cur.KbID, ch.EmbeddingSpace, "FOR SHARE")
		if err != nil {
			return nil, err
		}
		vec, dim, space, nextVec := any(pgvector.NewHalfVector(ch.Embedding)), len(ch.Embedding), ch.EmbeddingSpace, any(nil)
		if next {
			vec, dim, space, nextVec = nil, 0, "", pgvector.NewHalfVector(ch.Embedding)
		}
		if err := s.db.Exec(`UPDATE chunks SET content = ?, token_count = ?, term_count = ?, embedding = ?, embedding_dim = ?,
			embedding_space = ?, next_embedding = ?, enabled = ?, revision = revision + 1 WHERE id = ?`,
			ch.Content, ch.TokenCount, ch.TermCount, vec, dim, space, nextVec, ch.Enabled, cur.ID).Error; err != nil {
			return nil, translate(err)
		}
		cur.Content, cur.TokenCount, cur.TermCount = ch.Content, ch.TokenCount, int64(ch.TermCount)
	} else if err := s.db.Exec(`UPDATE chunks SET enabled = ?, revision = revision + 1 WHERE id = ?`, ch.Enabled, cur.ID).Error; err != nil {
		return nil, translate(err)
	}
	if ch.Enabled && (!cur.Enabled || edited) {
		if err := s.indexChunks(cur.KbID, []service.Chunk{{ID: service.ID(cur.ID), Terms: ch.Terms, TermCount: ch.TermCount}}); err != nil {
			return nil, err
		}
	}
	cur.Enabled = ch.Enabled
	cur.Revision++
	return cur.chunk(), nil
}

// recordRevision writes a chunk's revision, recounts its document's
// curated chunks and, with a search engine whose copy of the document is
// being brought up to date, marks that copy behind again: the message in
// flight may carry the state before this change, and would otherwise
// write it over what this change mirrored.
func (s *Store) recordRevision(doc *documentRow, before, after *service.Chunk, ch service.ChunkChange) (*service.ChunkRevision, error) {
	rev := &service.ChunkRevision{ID: ch.RevisionID, DocumentID: service.ID(doc.ID), KnowledgeBaseID: service.ID(doc.KbID),
		Generation: doc.Generation, Action: ch.Action, ActorUserID: ch.ActorUserID, ActorName: ch.ActorName}
	place := func(c *service.Chunk) {
		ordinal, manual := c.Ordinal, c.Manual
		rev.Ordinal, rev.Section, rev.Manual = &ordinal, c.Section, &manual
	}
	if before != nil {
		rev.ChunkID, rev.Revision = before.ID, before.Revision+1
		rev.ContentBefore, rev.EnabledBefore = &before.Content, &before.Enabled
		place(before)
	}
	if after != nil {
		rev.ChunkID, rev.Revision = after.ID, after.Revision
		rev.ContentAfter, rev.EnabledAfter = &after.Content, &after.Enabled
		place(after)
	}
	var actor *int64
	if ch.ActorUserID != 0 {
		a := int64(ch.ActorUserID)
		actor = &a
	}
	if err := s.db.Raw(`INSERT INTO chunk_revisions (id, chunk_id, document_id, kb_id, generation, revision, action,
			content_before, content_after, enabled_before, enabled_after, actor_user_id, actor_name, ordinal, section, manual)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING created_at`,
		int64(rev.ID), int64(rev.ChunkID), doc.ID, doc.KbID, doc.Generation, rev.Revision, string(rev.Action),
		rev.ContentBefore, rev.ContentAfter, rev.EnabledBefore, rev.EnabledAfter, actor, rev.ActorName,
		rev.Ordinal, rev.Section, rev.Manual).
		Scan(&rev.CreatedAt).Error; err != nil {
		return nil, translate(err)
	}
	if err := s.db.Exec(`UPDATE documents SET curated_chunks = (SELECT count(DISTINCT chunk_id) FROM chunk_revisions
		WHERE document_id = ? AND generation = ?), updated_at = now() WHERE id = ?`, doc.ID, doc.Generation, doc.ID).Error; err != nil {
		return nil, translate(err)
	}
	if s.search != nil {
		var pending []time.Time
		if err := s.db.Raw(`SELECT search_pending_since FROM documents WHERE id = ? AND search_pending_since IS NOT NULL`, doc.ID).
			Scan(&pending).Error; err != nil {
			return nil, translate(err)
		}
		if len(pending) > 0 {
			if err := s.searchChanged(doc.ID, doc.Generation, nil, ""); err != nil {
				return nil, err
			}
		}
	}
	return rev, nil
}

// AddChunk adds a chunk written by hand to a live document of kbIDs, after
// its last chunk, as revision 1 ("create"). mirror runs under the
// document's lock with the chunk as it will be stored (its generation and
// ordinal set), for the same reason as CurateChunk's change.
func (s *Store) AddChunk(ctx context.Context, docID service.ID, kbIDs []service.ID, c service.Chunk, ch service.ChunkChange,
	mirror func(c *service.Chunk) error) (*service.Chunk, *service.ChunkRevision, error) {
	return s.writeChunk(ctx, c, ch, mirror, func(tx *Store, c *service.Chunk) (*documentRow, error) {
		doc, err := tx.lockLiveDocument(service.ErrNotFound,
			`SELECT id FROM documents WHERE id = ? AND kb_id = ANY(?) AND deleted_at IS NULL`, int64(docID), idArray(kbIDs))
		if err != nil {
			return nil, err
		}
		if doc.Kind == string(service.DocumentFile) && doc.Status != string(service.DocumentReady) {
			return nil, service.Errorf(service.ErrConflict, "document %s is %s: add chunks once it is ready", docID, doc.Status)
		}
		if c.Ordinal, err = tx.nextOrdinal(doc); err != nil {
			return nil, err
		}
		c.DocumentID, c.KnowledgeBaseID, c.Generation = service.ID(doc.ID), service.ID(doc.KbID), doc.Generation
		c.Content, c.Enabled, c.Manual, c.Revision = ch.Content, true, true, 1
		return doc, nil
	})
}

// writeChunk writes one chunk in a transaction: place locks the chunk's
// document and sets where in it c goes, then putChunk writes it (mirror
// first). It returns c as stored, without its vector and terms, and its
// revision.
func (s *Store) writeChunk(ctx context.Context, c service.Chunk, ch service.ChunkChange, mirror func(c *service.Chunk) error,
	place func(tx *Store, c *service.Chunk) (*documentRow, error)) (*service.Chunk, *service.ChunkRevision, error) {
	var rev *service.ChunkRevision
	err := s.WithinTx(ctx, func(tx *Store) error {
		doc, err := place(tx, &c)
		if err != nil {
			return err
		}
		rev, err = tx.putChunk(doc, &c, ch, mirror)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	c.Embedding, c.Terms = nil, nil
	return &c, rev, nil
}

// ManualDocument returns the live manual document of a knowledge base,
// creating it (with id) when it has none; two first callers make one
// document (the unique index documents_kb_manual_live).
func (s *Store) ManualDocument(ctx context.Context, kbID, id service.ID, createdBy service.ID) (*service.Document, error) {
	db := s.conn(ctx)
	var by *int64
	if createdBy != 0 {
		b := int64(createdBy)
		by = &b
	}
	if err := db.Exec(`INSERT INTO documents (id, kb_id, name, mime, size, status, kind, created_by)
		SELECT ?, ?, ?, 'text/plain', 0, 'ready', 'manual', ? WHERE EXISTS (SELECT 1 FROM knowledge_bases WHERE id = ? AND deleted_at IS NULL)
		ON CONFLICT (kb_id) WHERE kind = 'manual' AND deleted_at IS NULL DO NOTHING`,
		int64(id), int64(kbID), service.ManualDocumentName, by, int64(kbID)).Error; err != nil {
		return nil, translate(err)
	}
	return take(db.Where("kb_id = ? AND kind = 'manual'", int64(kbID)), documentRow.doc)
}

// revisionRow is a chunk_revisions row.
type revisionRow struct {
	ID, ChunkID, DocumentID, KbID int64
	Generation, Revision          int
	Action                        string
	ContentBefore, ContentAfter   *string
	EnabledBefore, EnabledAfter   *bool
	ActorUserID                   *int64
	ActorName                     string
	CreatedAt                     time.Time
	Ordinal                       *int
	Section                       *string
	Manual                        *bool
}

func (r revisionRow) revision() service.ChunkRevision {
	out := service.ChunkRevision{ID: service.ID(r.ID), ChunkID: service.ID(r.ChunkID), DocumentID: service.ID(r.DocumentID),
		KnowledgeBaseID: service.ID(r.KbID), Generation: r.Generation, Revision: r.Revision, Action: service.ChunkAction(r.Action),
		ContentBefore: r.ContentBefore, ContentAfter: r.ContentAfter, EnabledBefore: r.EnabledBefore, EnabledAfter: r.EnabledAfter,
		ActorName: r.ActorName, CreatedAt: r.CreatedAt, Ordinal: r.Ordinal, Section: deref(r.Section), Manual: r.Manual}
	if r.ActorUserID != nil {
		out.ActorUserID = service.ID(*r.ActorUserID)
	}
	return out
}

const revisionColumns = `id, chunk_id, document_id, kb_id, generation, revision, action, content_before, content_after,
	enabled_before, enabled_after, actor_user_id, actor_name, created_at, ordinal, section, manual`

// ChunkRevisions returns a chunk's revisions, newest first, when the chunk
// (live or deleted) belongs to one of kbIDs; none otherwise.
func (s *Store) ChunkRevisions(ctx context.Context, chunkID service.ID, kbIDs []service.ID) ([]service.ChunkRevision, error) {
	var rows []revisionRow
	if err := s.conn(ctx).Raw(`SELECT `+revisionColumns+`
		FROM chunk_revisions WHERE chunk_id = ? AND kb_id = ANY(?) ORDER BY revision DESC`, int64(chunkID), idArray(kbIDs)).
		Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	return convert(rows, revisionRow.revision), nil
}

// errRevision is returned for a revision number the chunk does not have.
func errRevision(chunkID service.ID, n int) error {
	return fmt.Errorf("%w: chunk %s has no revision %d", service.ErrNotFound, chunkID, n)
}

// ChunkRevisionState returns the state a chunk had at revision n: the
// state after revision n, or for n = 0 the state before its first
// revision (as parsed).
func (s *Store) ChunkRevisionState(ctx context.Context, chunkID service.ID, kbIDs []service.ID, n int) (content string, enabled bool, err error) {
	revs, err := s.ChunkRevisions(ctx, chunkID, kbIDs)
	if err != nil {
		return "", false, err
	}
	for _, r := range revs {
		switch {
		case n == 0 && r.Revision == 1 && r.ContentBefore != nil:
			return *r.ContentBefore, *r.EnabledBefore, nil
		case n > 0 && r.Revision == n && r.ContentAfter != nil:
			return *r.ContentAfter, *r.EnabledAfter, nil
		}
	}
	return "", false, errRevision(chunkID, n)
}

// DeletedChunks returns the deletions of a live document's current chunks
// that no restore has undone, newest first, when the document belongs to
// one of kbIDs: the chunks a restore can bring back (those of an earlier
// generation went with the file's old chunks at a reindex).
func (s *Store) DeletedChunks(ctx context.Context, docID service.ID, kbIDs []service.ID) ([]service.ChunkRevision, error) {
	var rows []revisionRow
	if err := s.conn(ctx).Raw(`SELECT `+revisionColumns+` FROM chunk_revisions r
		WHERE r.document_id = ? AND r.kb_id = ANY(?) AND r.action = 'delete'
		  AND r.generation = (SELECT generation FROM documents WHERE id = ? AND deleted_at IS NULL)
		  AND NOT EXISTS (SELECT 1 FROM chunk_revisions l WHERE l.chunk_id = r.chunk_id AND l.revision > r.revision)
		  AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = r.chunk_id)
		ORDER BY r.created_at DESC, r.id DESC LIMIT ?`, int64(docID), idArray(kbIDs), int64(docID), maxDeletedChunks).
		Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	return convert(rows, revisionRow.revision), nil
}

// maxDeletedChunks bounds DeletedChunks: a document's chunk list is read
// 500 at a time, and a deletion list longer than that is a reindex's job.
const maxDeletedChunks = 500

// RestoreDeleted writes a deleted chunk back, as the new revision after
// its deletion del: c holds its content and enabled state, ch the vector
// and keyword terms of that content. Under the document's lock it checks
// that del is still the chunk's last revision and of the document's
// current generation (a reindex since put the file's chunks back instead:
// a conflict), puts the chunk at its old ordinal when that is free (after
// the last chunk otherwise) with its old section, calls mirror with it as
// it will be stored (for the same reason as CurateChunk's change), and
// indexes it when enabled.
func (s *Store) RestoreDeleted(ctx context.Context, del service.ChunkRevision, c service.Chunk, ch service.ChunkChange,
	mirror func(c *service.Chunk) error) (*service.Chunk, *service.ChunkRevision, error) {
	return s.writeChunk(ctx, c, ch, mirror, func(tx *Store, c *service.Chunk) (*documentRow, error) {
		doc, err := tx.lockLiveDocument(service.Errorf(service.ErrNotFound, "document %s of chunk %s was deleted", del.DocumentID, del.ChunkID),
			`SELECT id FROM documents WHERE id = ? AND kb_id = ? AND deleted_at IS NULL`, int64(del.DocumentID), int64(del.KnowledgeBaseID))
		if err != nil {
			return nil, err
		}
		if doc.Generation != del.Generation {
			return nil, service.Errorf(service.ErrConflict, "document %d was reindexed since chunk %s was deleted: its chunks come from its file again", doc.ID, del.ChunkID)
		}
		if doc.Kind == string(service.DocumentFile) && doc.Status != string(service.DocumentReady) {
			return nil, service.Errorf(service.ErrConflict, "document %d is %s: restore chunks once it is ready", doc.ID, doc.Status)
		}
		var state struct {
			Last int
			Live bool
		}
		if err := tx.db.Raw(`SELECT (SELECT coalesce(max(revision), 0) FROM chunk_revisions WHERE chunk_id = ?) AS last,
				EXISTS (SELECT 1 FROM chunks WHERE id = ?) AS live`, int64(del.ChunkID), int64(del.ChunkID)).Scan(&state).Error; err != nil {
			return nil, translate(err)
		}
		if state.Live || state.Last != del.Revision {
			return nil, service.Errorf(service.ErrConflict, "chunk %s changed meanwhile (revision %d): reload it", del.ChunkID, state.Last)
		}
		var free []bool
		if del.Ordinal != nil {
			if err := tx.db.Raw(`SELECT NOT EXISTS (SELECT 1 FROM chunks WHERE document_id = ? AND generation = ? AND ordinal = ?)`,
				doc.ID, doc.Generation, *del.Ordinal).Scan(&free).Error; err != nil {
				return nil, translate(err)
			}
		}
		if len(free) == 1 && free[0] {
			c.Ordinal = *del.Ordinal
		} else if c.Ordinal, err = tx.nextOrdinal(doc); err != nil {
			return nil, err
		}
		manual := del.Manual != nil && *del.Manual
		if del.Manual == nil {
			var created []bool
			if err := tx.db.Raw(`SELECT EXISTS (SELECT 1 FROM chunk_revisions WHERE chunk_id = ? AND revision = 1 AND action = 'create')`,
				int64(del.ChunkID)).Scan(&created).Error; err != nil {
				return nil, translate(err)
			}
			manual = len(created) == 1 && created[0]
		}
		c.ID, c.DocumentID, c.KnowledgeBaseID, c.Generation = del.ChunkID, service.ID(doc.ID), service.ID(doc.KbID), doc.Generation
		c.Section, c.Manual, c.Revision = del.Section, manual, del.Revision+1
		return doc, nil
	})
}

// putChunk writes one chunk back into a document's live generation — a new
// manual chunk or a restored one — with its manual flag, revision and
// enabled state and ch's terms and vector: it hands the chunk to mirror
// first, then stores it, indexes it when enabled, counts it on the document
// and records the revision that made it.
func (s *Store) putChunk(doc *documentRow, c *service.Chunk, ch service.ChunkChange, mirror func(c *service.Chunk) error) (*service.ChunkRevision, error) {
	c.TokenCount, c.Terms, c.TermCount, c.Embedding = ch.TokenCount, ch.Terms, ch.TermCount, ch.Embedding
	if err := mirror(c); err != nil {
		return nil, err
	}
	next, err := s.spaceRole(doc.KbID, ch.EmbeddingSpace, "FOR SHARE")
	if err != nil {
		return nil, err
	}
	if err := s.insertChunks(doc.ID, doc.KbID, doc.Generation, ch.EmbeddingSpace, next, []service.Chunk{*c}); err != nil {
		return nil, err
	}
	if err := s.db.Exec(`UPDATE chunks SET manual = ?, revision = ?, enabled = ? WHERE id = ?`,
		c.Manual, c.Revision, c.Enabled, int64(c.ID)).Error; err != nil {
		return nil, translate(err)
	}
	if c.Enabled {
		if err := s.indexChunks(doc.KbID, []service.Chunk{*c}); err != nil {
			return nil, err
		}
	}
	if err := s.db.Exec(`UPDATE documents SET chunk_count = chunk_count + 1 WHERE id = ?`, doc.ID).Error; err != nil {
		return nil, translate(err)
	}
	return s.recordRevision(doc, nil, c, ch)
}

// nextOrdinal is the ordinal after the last chunk of the document's live
// generation.
func (s *Store) nextOrdinal(doc *documentRow) (int, error) {
	var last []int
	if err := s.db.Raw(`SELECT coalesce(max(ordinal), -1) FROM chunks WHERE document_id = ? AND generation = ?`, doc.ID, doc.Generation).
		Scan(&last).Error; err != nil {
		return 0, translate(err)
	}
	return last[0] + 1, nil
}
