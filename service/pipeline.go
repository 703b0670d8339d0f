package service

import "time"

// DocumentQuery selects a knowledge base's live documents for a listing,
// newest first. Zero fields do not filter.
type DocumentQuery struct {
	Before       ID             // cursor: documents with a smaller id
	Limit        int            // page size
	ExternalID   string         // the one document with this external id
	Status       DocumentStatus // documents in this state
	UpdatedSince time.Time      // documents changed at or after this time
}

// DocumentSource is where an imported document is fetched from, and how
// its last fetch went.
type DocumentSource struct {
	URL string `json:"url"`
	// RefreshSeconds is how often the URL is fetched again (0: once).
	RefreshSeconds int        `json:"refreshSeconds"`
	ETag           string     `json:"etag,omitempty"`
	LastModified   string     `json:"lastModified,omitempty"`
	FetchedAt      *time.Time `json:"fetchedAt,omitempty"`
	NextFetchAt    *time.Time `json:"nextFetchAt,omitempty"`
	// LastError is why the last fetch failed ("" when it succeeded); a
	// failed refresh leaves the document's served version in place.
	LastError string `json:"lastError,omitempty"`
}

// Fetched is the outcome of one fetch of an imported document.
type Fetched struct {
	// Version is the new content's document (name, mime, size, SHA256,
	// Status and Error set; pending to be ingested, or failed when its type
	// cannot be), nil when the fetch failed or found nothing new.
	Version      *Document
	Blob         []byte
	ETag         string
	LastModified string
	Err          string // why the fetch failed; "" when it worked
}

// MessageFor builds the ingest message of a document generation, for a
// store to queue in the transaction that makes the generation.
type MessageFor func(*Document) (OutboxMessage, error)

// Webhook is a knowledge base's signed notification endpoint. Secret is
// set only in the answer that creates it.
type Webhook struct {
	ID              ID     `json:"id"`
	KnowledgeBaseID ID     `json:"knowledgeBaseId"`
	URL             string `json:"url"`
	Secret          string `json:"secret,omitempty"`
	CreatedBy       ID     `json:"createdBy"`
	CreatedByName   string `json:"createdByName"` // "" when the creator is deleted
	Pending         int    `json:"pendingDeliveries"`
	Failed          int    `json:"failedDeliveries"` // dead-lettered
	// Skipped counts events not sent because the creator could no longer
	// read the knowledge base when they were due.
	Skipped   int       `json:"skippedDeliveries"`
	LastError string    `json:"lastError,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// WebhookDelivery is one event on its way to one webhook.
type WebhookDelivery struct {
	ID              int64
	WebhookID       ID
	KnowledgeBaseID ID
	CreatedBy       ID // the webhook's creator, whose access it runs under
	URL             string
	SecretEnc       []byte // the webhook's sealed secret
	Event           string // document.ready or document.failed
	Payload         []byte
	Attempts        int // before this one
}
