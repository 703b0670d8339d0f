package ingest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest/parse"
	"github.com/ragent-go/ragent/text"
)

// Chunk curation (README "Curating chunks"): editors of a knowledge base
// edit, disable, enable, add and delete its chunks. A change re-embeds and
// re-indexes its one chunk, on Postgres in the transaction that records its
// revision and audit event, and on the search engine (when one is
// configured) under that chunk's lock before the commit, the way a reindex
// writes a new generation before the commit that replaces the old: a
// search finds the old text until the commit and the new one from then on
// (hits are read back from Postgres, which is the one that changes at the
// commit), and when the API answers both backends serve the new state. A
// disabled chunk is dropped from Postgres's keyword index and vector
// search at the commit and from the engine before it.
//
// What a reindex does with curated chunks is the file's rule: a reindex,
// a new version (same external id) or a URL refresh rebuilds the
// document's chunks from its file, so edits, disables, deletions and
// chunks added to that document are discarded (their revisions stay as
// history). Chunks meant to outlive the file go into the knowledge base's
// manual document, which no reindex touches. Document.CuratedChunks says
// how many chunks a reindex would discard; the UI asks before it does.

// CurationStore is the storage of curation (repository.Store).
type CurationStore interface {
	CurateChunk(ctx context.Context, id service.ID, kbIDs []service.ID,
		change func(cur *service.Chunk) (service.ChunkChange, error)) (*service.Chunk, *service.ChunkRevision, error)
	AddChunk(ctx context.Context, docID service.ID, kbIDs []service.ID, c service.Chunk, ch service.ChunkChange,
		mirror func(c *service.Chunk) error) (*service.Chunk, *service.ChunkRevision, error)
	ManualDocument(ctx context.Context, kbID, id, createdBy service.ID) (*service.Document, error)
	ChunkRevisions(ctx context.Context, chunkID service.ID, kbIDs []service.ID) ([]service.ChunkRevision, error)
	ChunkRevisionState(ctx context.Context, chunkID service.ID, kbIDs []service.ID, n int) (content string, enabled bool, err error)
	DeletedChunks(ctx context.Context, docID service.ID, kbIDs []service.ID) ([]service.ChunkRevision, error)
	RestoreDeleted(ctx context.Context, del service.ChunkRevision, c service.Chunk, ch service.ChunkChange,
		mirror func(c *service.Chunk) error) (*service.Chunk, *service.ChunkRevision, error)
}

// EnableCuration turns on chunk curation, kept in store. Call it before the
// service is used.
func (s *Service) EnableCuration(store CurationStore) { s.curation = store }

// ChunkPatch is PATCH /chunks/{id}: a new content, a new enabled state, or
// both. Revision, when set, is the revision the editor saw: a chunk
// changed since is a conflict instead of a silent overwrite.
type ChunkPatch struct {
	Content  *string `json:"content"`
	Enabled  *bool   `json:"enabled"`
	Revision *int    `json:"revision"`
}

// editorKBs returns the knowledge bases p reads and those p edits: a
// chunk of an unreadable one is not found, of a read-only one forbidden.
func (s *Service) editorKBs(ctx context.Context, p service.Principal) (readable []service.ID, roles map[service.ID]service.KBRole, err error) {
	if s.curation == nil {
		return nil, nil, service.Errorf(service.ErrUnavailable, "chunk curation is not enabled")
	}
	roles, err = s.access.Roles(ctx, p, nil)
	if err != nil {
		return nil, nil, err
	}
	return slices.Collect(maps.Keys(roles)), roles, nil
}

// mayEdit refuses unless roles make p an editor of knowledge base kbID.
func mayEdit(roles map[service.ID]service.KBRole, kbID service.ID) error {
	if r := roles[kbID]; !r.AtLeast(service.KBEditor) {
		return service.Errorf(service.ErrForbidden, "this needs the %s role on knowledge base %s (you are %s)", service.KBEditor, kbID, r)
	}
	return nil
}

// editableChunk reads a chunk p may edit.
func (s *Service) editableChunk(ctx context.Context, p service.Principal, id service.ID) (*service.Chunk, []service.ID, error) {
	readable, roles, err := s.editorKBs(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	c, err := s.editableIn(ctx, id, readable, roles)
	if err != nil {
		return nil, nil, err
	}
	return c, []service.ID{c.KnowledgeBaseID}, nil
}

// editableIn reads a live chunk of one of the readable knowledge bases
// that roles let p edit.
func (s *Service) editableIn(ctx context.Context, id service.ID, readable []service.ID, roles map[service.ID]service.KBRole) (*service.Chunk, error) {
	c, err := s.store.ChunkIn(ctx, id, readable)
	if errors.Is(err, service.ErrNotFound) {
		return nil, service.Errorf(service.ErrNotFound, "chunk %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	if err := mayEdit(roles, c.KnowledgeBaseID); err != nil {
		return nil, err
	}
	return c, nil
}

// editorRevisions reads a chunk's revisions, newest first, from the
// knowledge bases p reads, with them and p's roles there.
func (s *Service) editorRevisions(ctx context.Context, p service.Principal, id service.ID) ([]service.ChunkRevision, []service.ID, map[service.ID]service.KBRole, error) {
	readable, roles, err := s.editorKBs(ctx, p)
	if err != nil {
		return nil, nil, nil, err
	}
	revs, err := s.curation.ChunkRevisions(ctx, id, readable)
	return revs, readable, roles, err
}

// embedOne embeds one chunk text in the worker's space and computes its
// keyword terms, as ingestion would for the same text and section.
func (s *Service) embedOne(ctx context.Context, p service.Principal, kbID, chunkID service.ID, content, section string, revision int) (service.ChunkChange, error) {
	kbs, err := s.store.KnowledgeBaseSettings(ctx, []service.ID{kbID})
	if err != nil {
		return service.ChunkChange{}, err
	}
	if len(kbs) == 0 {
		return service.ChunkChange{}, service.Errorf(service.ErrNotFound, "knowledge base %s not found", kbID)
	}
	if err := s.canEmbed(kbs[0]); err != nil {
		return service.ChunkChange{}, service.Errorf(service.ErrConflict, "%v", err)
	}
	ctx = service.WithUsageScope(ctx, service.UsageScope{UserID: p.UserID, KnowledgeBaseID: kbID})
	ctx = service.WithUsageCall(ctx, service.UsageCall{Kind: service.UsageEmbedding, ID: fmt.Sprintf("curate:%s:%d", chunkID, revision)})
	vecs, err := s.embedder.Embed(ctx, service.EmbedDocument, []string{content})
	if err != nil {
		return service.ChunkChange{}, fmt.Errorf("embed: %w", err)
	}
	if len(vecs) != 1 {
		return service.ChunkChange{}, fmt.Errorf("embed: got %d vectors for 1 text", len(vecs))
	}
	ch := s.terms(content, section)
	ch.Embedding, ch.EmbeddingSpace = vecs[0], s.cfg.Space.Key()
	return ch, nil
}

// terms fills a change's content with its keyword terms and token count.
func (s *Service) terms(content, section string) service.ChunkChange {
	tf, n := IndexTerms(parse.Chunk{Content: content, Section: section})
	return service.ChunkChange{Content: content, Terms: tf, TermCount: n, TokenCount: text.CountTokens(content)}
}

// mirror brings the search engine's copy of one chunk to its new state (a
// chunk that stays enabled is written, searchable when this returns; a
// disabled or deleted one removed), under the chunk's lock. Without an
// engine it does nothing.
func (s *Service) mirror(ctx context.Context, c *service.Chunk, ch service.ChunkChange) error {
	if s.search == nil {
		return nil
	}
	if ch.Delete || !ch.Enabled {
		return s.search.index.DeleteChunks(ctx, []service.ID{c.ID})
	}
	doc := *c
	doc.Content = ch.Content
	if ch.Embedding != nil {
		// A new content; otherwise (an enable) the vector Postgres has,
		// which CurateChunk read with the chunk.
		doc.Embedding, doc.EmbeddingSpace = ch.Embedding, ch.EmbeddingSpace
	}
	return s.search.index.IndexSearchable(ctx, SearchDocs([]service.Chunk{doc}))
}

// resyncChunk writes the document's enabled chunks as Postgres has them
// now: the engine's copy after a change that did not commit.
func (s *Service) resyncChunk(ctx context.Context, docID service.ID) error {
	st, err := s.search.store.DocumentSearchState(ctx, docID)
	if err != nil {
		return err
	}
	return s.search.index.IndexSearchable(ctx, SearchDocs(st.Chunks))
}

// change runs one audited curation of a chunk: build makes the change from
// the chunk's locked state.
func (s *Service) change(ctx context.Context, p service.Principal, action string, id service.ID, detail string, kbIDs []service.ID,
	build func(cur *service.Chunk) (service.ChunkChange, error)) (*service.Chunk, error) {
	ev := service.AuditEvent{Action: action, TargetType: service.TargetChunk, TargetID: id.String()}
	var mirrored *service.Chunk
	out, err := service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, ev *service.AuditEvent) (*service.Chunk, error) {
		c, rev, err := s.curation.CurateChunk(ctx, id, kbIDs, func(cur *service.Chunk) (service.ChunkChange, error) {
			ch, err := build(cur)
			if err != nil {
				return ch, err
			}
			ch.ActorUserID, ch.ActorName = p.UserID, p.Username
			if ch.RevisionID, err = s.ids.NextID(); err != nil {
				return ch, err
			}
			if err := s.mirror(ctx, cur, ch); err != nil {
				return ch, fmt.Errorf("%w: search engine: %v", service.ErrUnavailable, err)
			}
			mirrored = cur
			return ch, nil
		})
		if err != nil {
			return nil, err
		}
		ev.Detail = fmt.Sprintf("kb=%s document=%s revision=%d %s%s", rev.KnowledgeBaseID, rev.DocumentID, rev.Revision, rev.Action, detail)
		return c, nil
	})
	if err != nil && mirrored != nil {
		// The engine took a state that did not commit: write back what
		// Postgres has (its hits are read from Postgres meanwhile, so a
		// search never returned the uncommitted text).
		if rerr := s.resyncChunk(context.WithoutCancel(ctx), mirrored.DocumentID); rerr != nil {
			s.log.WarnContext(ctx, "could not restore the search engine's copy of a chunk after a failed change; ragent reindex-search repairs it",
				"chunk", id, "err", rerr)
		}
	}
	return out, err
}

// UpdateChunk edits a chunk's content, enables or disables it (editors of
// its knowledge base).
func (s *Service) UpdateChunk(ctx context.Context, p service.Principal, id service.ID, in ChunkPatch) (*service.Chunk, error) {
	if in.Content == nil && in.Enabled == nil {
		return nil, service.Errorf(service.ErrInvalid, "give content or enabled")
	}
	c, kbIDs, err := s.editableChunk(ctx, p, id)
	if err != nil {
		return nil, err
	}
	var edit *service.ChunkChange
	if in.Content != nil {
		content, err := service.CheckChunkContent(*in.Content)
		if err != nil {
			return nil, err
		}
		ch, err := s.embedOne(ctx, p, c.KnowledgeBaseID, id, content, c.Section, c.Revision+1)
		if err != nil {
			return nil, err
		}
		edit = &ch
	}
	return s.change(ctx, p, service.AuditChunkUpdate, id, "", kbIDs, func(cur *service.Chunk) (service.ChunkChange, error) {
		if in.Revision != nil && *in.Revision != cur.Revision {
			return service.ChunkChange{}, service.Errorf(service.ErrConflict, "chunk %s is at revision %d, not %d: reload it", id, cur.Revision, *in.Revision)
		}
		ch := s.terms(cur.Content, cur.Section)
		ch.TokenCount = cur.TokenCount
		if edit != nil && edit.Content != cur.Content {
			ch = *edit
		}
		ch.Enabled = cur.Enabled
		if in.Enabled != nil {
			ch.Enabled = *in.Enabled
		}
		switch {
		case ch.Embedding != nil:
			ch.Action = service.ChunkEdit
		case ch.Enabled == cur.Enabled:
			return ch, service.Errorf(service.ErrInvalid, "nothing changes: the chunk already has this content and state")
		case ch.Enabled:
			ch.Action = service.ChunkEnable
		default:
			ch.Action = service.ChunkDisable
		}
		return ch, nil
	})
}

// RestoreChunk brings a chunk back to the state it had at revision n (0:
// as parsed), as a new revision (editors). A deleted chunk comes back too
// (restoreDeleted).
func (s *Service) RestoreChunk(ctx context.Context, p service.Principal, id service.ID, n int) (*service.Chunk, error) {
	c, kbIDs, err := s.editableChunk(ctx, p, id)
	if errors.Is(err, service.ErrNotFound) {
		return s.restoreDeleted(ctx, p, id, n)
	}
	if err != nil {
		return nil, err
	}
	content, enabled, err := s.curation.ChunkRevisionState(ctx, id, kbIDs, n)
	if err != nil {
		return nil, service.Errorf(service.ErrNotFound, "chunk %s has no revision %d", id, n)
	}
	var edit *service.ChunkChange
	if content != c.Content {
		ch, err := s.embedOne(ctx, p, c.KnowledgeBaseID, id, content, c.Section, c.Revision+1)
		if err != nil {
			return nil, err
		}
		edit = &ch
	}
	return s.change(ctx, p, service.AuditChunkRestore, id, fmt.Sprintf(" to=%d", n), kbIDs, func(cur *service.Chunk) (service.ChunkChange, error) {
		ch := s.terms(cur.Content, cur.Section)
		ch.TokenCount = cur.TokenCount
		if content != cur.Content {
			if edit == nil || edit.Content != content {
				return ch, service.Errorf(service.ErrConflict, "chunk %s changed meanwhile: try again", id)
			}
			ch = *edit
		}
		ch.Enabled, ch.Action = enabled, service.ChunkRestore
		return ch, nil
	})
}

// DeletedChunks lists the deletions of a document's current chunks that
// can be restored, newest first: the deleting revisions, with the text
// and place the chunk had (editors: the text is no longer in the
// document).
func (s *Service) DeletedChunks(ctx context.Context, p service.Principal, docID service.ID) ([]service.ChunkRevision, error) {
	if s.curation == nil {
		return nil, service.Errorf(service.ErrUnavailable, "chunk curation is not enabled")
	}
	doc, err := s.document(ctx, p, docID, service.KBEditor)
	if err != nil {
		return nil, err
	}
	return s.curation.DeletedChunks(ctx, doc.ID, []service.ID{doc.KnowledgeBaseID})
}

// DeleteChunk removes a chunk; its revisions stay (editors).
func (s *Service) DeleteChunk(ctx context.Context, p service.Principal, id service.ID) error {
	_, kbIDs, err := s.editableChunk(ctx, p, id)
	if err != nil {
		return err
	}
	_, err = s.change(ctx, p, service.AuditChunkDelete, id, "", kbIDs, func(cur *service.Chunk) (service.ChunkChange, error) {
		return service.ChunkChange{Action: service.ChunkDelete, Delete: true}, nil
	})
	return err
}

// ChunkRevisions lists a chunk's revisions, newest first (editors: the
// history holds the texts the chunk no longer has).
func (s *Service) ChunkRevisions(ctx context.Context, p service.Principal, id service.ID) ([]service.ChunkRevision, error) {
	revs, readable, roles, err := s.editorRevisions(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if len(revs) == 0 {
		// A chunk never changed has no revisions; a live one p edits has
		// an empty history, anything else is not found.
		if _, err := s.editableIn(ctx, id, readable, roles); err != nil {
			return nil, err
		}
		return []service.ChunkRevision{}, nil
	}
	if err := mayEdit(roles, revs[0].KnowledgeBaseID); err != nil {
		return nil, err
	}
	return revs, nil
}
