package service

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Chunk curation (README "Curating chunks"): editors of a knowledge base
// fix its knowledge chunk by chunk instead of re-uploading a file. Every
// change is a ChunkRevision; a change re-embeds and re-indexes only its
// chunk, on both search backends, before the API answers.

// DocumentKind says where a document's chunks come from.
type DocumentKind string

const (
	// DocumentFile is an uploaded or imported file, parsed into chunks.
	DocumentFile DocumentKind = "file"
	// DocumentManual is a knowledge base's own document of chunks added by
	// hand (one per knowledge base, made with its first such chunk). No
	// file backs it, so nothing reindexes it.
	DocumentManual DocumentKind = "manual"
)

// ManualDocumentName is the name of a knowledge base's manual document.
const ManualDocumentName = "Manual chunks"

// ChunkAction is what a revision did.
type ChunkAction string

const (
	ChunkCreate  ChunkAction = "create"
	ChunkEdit    ChunkAction = "edit"
	ChunkDisable ChunkAction = "disable"
	ChunkEnable  ChunkAction = "enable"
	ChunkDelete  ChunkAction = "delete"
	ChunkRestore ChunkAction = "restore"
)

// MaxChunkContent is the longest chunk text an editor may write, in bytes:
// eight times a default chunk, far below what the embedders take.
const MaxChunkContent = 32 << 10

// ChunkRevision is one change of a chunk: who made it, when, and the state
// before and after. Content and enabled are nil where a side has none (a
// created chunk has no before, a deleted one no after).
type ChunkRevision struct {
	ID              ID          `json:"id"`
	ChunkID         ID          `json:"chunkId"`
	DocumentID      ID          `json:"documentId"`
	KnowledgeBaseID ID          `json:"knowledgeBaseId"`
	Generation      int         `json:"generation"`
	Revision        int         `json:"revision"`
	Action          ChunkAction `json:"action"`
	ContentBefore   *string     `json:"contentBefore"`
	ContentAfter    *string     `json:"contentAfter"`
	EnabledBefore   *bool       `json:"enabledBefore"`
	EnabledAfter    *bool       `json:"enabledAfter"`
	ActorUserID     ID          `json:"actorUserId,omitempty"`
	ActorName       string      `json:"actorName"`
	CreatedAt       time.Time   `json:"createdAt"`
	// Where the chunk stood and its section (migration 0026): what a
	// restore of a deleted chunk puts back. Nil and empty for revisions
	// recorded before them.
	Ordinal *int   `json:"ordinal,omitempty"`
	Section string `json:"section,omitempty"`
	Manual  *bool  `json:"-"`
}

// ChunkChange is the new state of a chunk a curation writes under the
// chunk's lock (repository.Store.CurateChunk). Delete removes it; otherwise
// Content and Enabled are its new state, and a changed content comes with
// its new vector (Embedding, in EmbeddingSpace) and keyword terms.
type ChunkChange struct {
	Action         ChunkAction
	Delete         bool
	Content        string
	Enabled        bool
	Embedding      []float32
	EmbeddingSpace string
	Terms          map[string]int
	TermCount      int
	TokenCount     int
	ActorUserID    ID
	ActorName      string
	RevisionID     ID
}

// CheckChunkContent refuses chunk text an editor may not write: empty,
// not UTF-8, holding NUL bytes (Postgres text cannot), or longer than
// MaxChunkContent. It returns the text trimmed.
func CheckChunkContent(s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return "", Errorf(ErrInvalid, "content must not be empty")
	case len(s) > MaxChunkContent:
		return "", Errorf(ErrTooLarge, "content is %d bytes; a chunk holds at most %d", len(s), MaxChunkContent)
	case !utf8.ValidString(s):
		return "", Errorf(ErrInvalid, "content is not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return "", Errorf(ErrInvalid, "content must not hold NUL characters")
	}
	return s, nil
}
