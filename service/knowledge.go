package service

import "time"

// KnowledgeBase is a named collection of documents searched together.
type KnowledgeBase struct {
	ID             ID     `json:"id"`
	Name           string `json:"name"`
	Description    string `json:"description"`
	EmbeddingModel string `json:"embeddingModel"`
	EmbeddingDim   int    `json:"embeddingDim"`
	// EmbeddingQueryPrefix and EmbeddingDocumentPrefix complete the
	// embedding space the chunks' vectors are in (Space).
	EmbeddingQueryPrefix    string `json:"embeddingQueryPrefix"`
	EmbeddingDocumentPrefix string `json:"embeddingDocumentPrefix"`
	// Reembedding is set while the chunks are re-embedded into the
	// configured space (docs/embeddings.md "Embedding model changes").
	Reembedding  *Reembedding `json:"reembedding,omitempty"`
	ChunkSize    int          `json:"chunkSize"`    // target tokens per chunk
	ChunkOverlap int          `json:"chunkOverlap"` // tokens repeated between chunks
	VectorWeight float64      `json:"vectorWeight"` // weight of the vector list in hybrid fusion (keyword list weighs 1)
	Visibility   Visibility   `json:"visibility"`
	// Role is the caller's effective role on it, filled in per request so
	// the UI knows which actions to offer.
	Role          KBRole    `json:"role,omitempty"`
	DocumentCount int       `json:"documentCount"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// Space is the embedding space the knowledge base's vectors are in.
func (kb *KnowledgeBase) Space() EmbeddingSpace {
	return EmbeddingSpace{Model: kb.EmbeddingModel, Dim: kb.EmbeddingDim,
		QueryPrefix: kb.EmbeddingQueryPrefix, DocumentPrefix: kb.EmbeddingDocumentPrefix}
}

// DocumentStatus is where a document is in the ingestion pipeline.
type DocumentStatus string

const (
	DocumentPending DocumentStatus = "pending"
	DocumentRunning DocumentStatus = "running"
	DocumentReady   DocumentStatus = "ready"
	DocumentFailed  DocumentStatus = "failed"
)

// Document is one uploaded file of a knowledge base.
type Document struct {
	ID              ID             `json:"id"`
	KnowledgeBaseID ID             `json:"knowledgeBaseId"`
	Name            string         `json:"name"`
	Mime            string         `json:"mime"`
	Size            int64          `json:"size"`
	SHA256          string         `json:"sha256"`
	Status          DocumentStatus `json:"status"`
	Error           string         `json:"error"`
	ChunkCount      int            `json:"chunkCount"`
	Generation      int            `json:"generation"`
	Attempts        int            `json:"attempts"`
	// ExternalID is the pipeline's own name for the document (unique among
	// a knowledge base's live documents); uploading it again replaces it.
	ExternalID string `json:"externalId,omitempty"`
	// Kind is DocumentFile, or DocumentManual for a knowledge base's own
	// document of chunks added by hand (curation.go).
	Kind DocumentKind `json:"kind"`
	// CuratedChunks counts the current generation's chunks changed by hand:
	// what a reindex of the file discards.
	CuratedChunks int `json:"curatedChunks"`
	// Source is where an imported document is fetched from.
	Source *DocumentSource `json:"source,omitempty"`
	// OCR says that some of the current generation's text was read from
	// images by OCR (a scan, or an image file): ingestion records it with
	// the chunks (Chunk.OCR), whatever their sections say.
	OCR bool `json:"ocr,omitempty"`
	// CreatedBy is the uploader, whom ingesting the document is spent for
	// (usage); 0 when unknown (documents stored before it was recorded).
	CreatedBy ID        `json:"-"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// OCRSectionSuffix ends the section of a chunk read by OCR ("Page 3
// (OCR)"): the page label tells a reader where to look and how the text
// was read. It is for readers only: Document.OCR is what the system goes by.
const OCRSectionSuffix = " (OCR)"

// SectionSeparator joins the headings of a chunk's section path
// ("Install > Linux"), and the names on an intent node's path.
const SectionSeparator = " > "

// Chunk is a retrievable piece of a document.
type Chunk struct {
	ID              ID     `json:"id"`
	DocumentID      ID     `json:"documentId"`
	KnowledgeBaseID ID     `json:"knowledgeBaseId"`
	Generation      int    `json:"generation"`
	Ordinal         int    `json:"ordinal"`
	Content         string `json:"content"`
	Section         string `json:"section"` // heading path, joined by SectionSeparator
	TokenCount      int    `json:"tokenCount"`
	// Enabled is false for a chunk an editor disabled: stored, never
	// retrieved. Manual says it was added by hand, not parsed from the
	// file; Revision counts its changes (0 as parsed). See curation.go.
	Enabled  bool `json:"enabled"`
	Manual   bool `json:"manual"`
	Revision int  `json:"revision"`
	// OCR says the chunk's text was read from an image by OCR; a document
	// is marked OCR when one of the chunks it is given is (not stored per
	// chunk).
	OCR       bool      `json:"-"`
	Embedding []float32 `json:"-"`
	// EmbeddingSpace is the key of Embedding's space, where a reader needs
	// it (an external search engine's copy); empty otherwise.
	EmbeddingSpace string `json:"-"`
	// Terms are the chunk's keyword-index terms with their frequencies, and
	// TermCount their total: what BM25 needs.
	Terms     map[string]int `json:"-"`
	TermCount int            `json:"-"`
}

// SearchMode selects the retrieval strategy.
type SearchMode string

const (
	SearchHybrid  SearchMode = "hybrid"
	SearchKeyword SearchMode = "keyword"
	SearchVector  SearchMode = "vector"
)

// Valid reports whether m is a known mode.
func (m SearchMode) Valid() bool {
	return m == SearchHybrid || m == SearchKeyword || m == SearchVector
}

// SearchResult is one ranked chunk.
type SearchResult struct {
	ChunkID         ID      `json:"chunkId"`
	DocumentID      ID      `json:"documentId"`
	DocumentName    string  `json:"documentName"`
	KnowledgeBaseID ID      `json:"knowledgeBaseId"`
	Content         string  `json:"content"`
	Section         string  `json:"section"`
	Score           float64 `json:"score"`
}

// IngestTopic is the MQ topic of document ingestion messages.
const IngestTopic = "ragent-document-ingest"

// IngestMessage asks a worker to (re)build the chunks of one document
// generation. Its MQ key is "documentId:generation".
type IngestMessage struct {
	DocumentID ID  `json:"documentId"`
	Generation int `json:"generation"`
	// Reembed, when set, asks to re-embed the generation's chunks into the
	// embedding space with this key (EmbeddingSpace.Key) instead of
	// building them; its MQ key is "documentId:generation:reembed:key".
	Reembed string `json:"reembed,omitempty"`
	// TraceParent is the W3C traceparent of the span that queued the
	// message (the upload, the reindex), so the worker's spans join the
	// same trace; empty when tracing is off.
	TraceParent string `json:"traceparent,omitempty"`
}

// OutboxMessage is a message stored with a business change in one
// transaction and published to the MQ afterwards (the transactional outbox).
type OutboxMessage struct {
	ID      ID
	Topic   string
	Key     string
	Payload []byte
}

// KeywordQuery is a BM25 query: distinct terms with their counts in the query.
type KeywordQuery struct {
	KnowledgeBaseIDs []ID
	Terms            []TermCount
	K1, B            float64
	Limit            int
}

// TermCount is a query term and how many times the query holds it (BM25
// weighs a term by its count; 0 counts as 1).
type TermCount struct {
	Term  string
	Count int
}

// VectorQuery is a nearest-neighbour query in one embedding space.
type VectorQuery struct {
	KnowledgeBaseIDs []ID
	Space            string // EmbeddingSpace.Key of Vector: only chunks of that space match
	Vector           []float32
	Limit            int
	EfSearch         int // HNSW candidate list; 0 means DefaultEfSearch
}

// DefaultEfSearch is the HNSW candidate list of a VectorQuery that sets
// none: both backends search this wide, so they rank alike.
const DefaultEfSearch = 100

// Candidates is the HNSW candidate list q searches with: EfSearch or its
// default, and never fewer than Limit.
func (q VectorQuery) Candidates() int {
	ef := q.EfSearch
	if ef <= 0 {
		ef = DefaultEfSearch
	}
	return max(ef, q.Limit)
}
