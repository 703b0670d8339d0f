package service

import "time"

// SearchIndexTopic is the MQ topic of search-index messages: with an
// external search engine (RAGENT_SEARCH_BACKEND=opensearch) a change to a
// document's chunks that ingestion did not write to the engine itself (the
// document deleted, a replacement's removed chunks, a re-embedding's
// switch, a generation committed while the engine did not answer) queues
// one in the same transaction, and a consumer brings the engine's copy of
// that document in line with Postgres.
const SearchIndexTopic = "ragent-search-index"

// SearchIndexMessage names the document whose chunks changed and the
// generation that changed them; its MQ key is "documentId:generation:search".
// The consumer reads the document's current state from Postgres, so a late,
// repeated or reordered message only repeats work.
type SearchIndexMessage struct {
	DocumentID ID  `json:"documentId"`
	Generation int `json:"generation"`
	// Removed are the chunks the change took out of Postgres, removed from
	// the engine by id: a search for them would miss those written too
	// recently for a refresh to have made them searchable.
	Removed []ID `json:"removed,omitempty"`
	// Listed says Removed lists every chunk the change removed. A message
	// without it (re-queued after the original was lost, or written
	// before this field existed) makes the consumer search the engine for
	// the document's leftovers instead.
	Listed bool `json:"listed,omitempty"`
}

// SearchDoc is what an external search engine holds of one chunk: its
// identity, the knowledge base the access filter matches, and its keyword
// terms (text.Tokenize's output, duplicates kept) as the BM25 field.
type SearchDoc struct {
	ChunkID         ID
	DocumentID      ID
	KnowledgeBaseID ID
	Generation      int
	Terms           []string
	// Space is the key of Vector's embedding space; both are empty for a
	// chunk without a vector (one written during a re-embedding).
	Space  string
	Vector []float32
}

// SearchHit is a chunk an external search engine ranked: its id, the
// document and generation it was indexed under, and its score. Postgres
// fills in the rest (or drops it: see repository.Store.ChunkResults).
type SearchHit struct {
	ChunkID    ID
	DocumentID ID
	Generation int
	Score      float64
}

// SearchState is what an external search engine should hold of one
// document, read from Postgres in one snapshot.
type SearchState struct {
	// Live is false for a deleted (or never existing) document: the engine
	// should hold none of its chunks.
	Live       bool
	Generation int
	// PendingSince identifies the change being mirrored (nil when the
	// engine's copy is current); marking the copy current succeeds only if
	// no later change replaced it.
	PendingSince *time.Time
	// Chunks are the document's chunks with ID, DocumentID,
	// KnowledgeBaseID, Generation, Content and Section set.
	Chunks []Chunk
}
