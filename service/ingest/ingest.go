// Package ingest is the document pipeline: upload (upload.go: size cap,
// content sniffing, hashing, blob + document + outbox row in one
// transaction), then on a worker parse → chunk → embed → index (process.go,
// in work slots shared fairly between knowledge bases, fairslots.go; the
// file reading itself is package parse), and the document lifecycle around
// it (documents.go: list, delete, reindex, chunk preview; relay.go: the
// outbox relay, which publishes a knowledge base's documents in turn with a
// bound in flight, and the reaper of stuck documents and of sent outbox
// rows past their retention), the background re-embedding of knowledge
// bases whose embedding space is not the configured one (reembed.go), and,
// for pipelines (pipeline.go, fetch.go, webhooks.go), documents replaced by
// external id, URL imports fetched by a fetcher under an SSRF policy
// (netguard.go) and refreshed, and signed webhooks on ready and failed.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest/parse"
)

// Store keeps documents, their blobs and chunks, and the outbox.
type Store interface {
	// KnowledgeBaseSettings returns the live knowledge bases among ids;
	// their DocumentCount is not needed and may be 0.
	KnowledgeBaseSettings(ctx context.Context, ids []service.ID) ([]*service.KnowledgeBase, error)
	CreateUpload(ctx context.Context, d *service.Document, blob []byte, msg service.OutboxMessage) error
	Document(ctx context.Context, id service.ID) (*service.Document, error)
	// DocumentIn is Document when the document is in one of kbIDs, else
	// service.ErrNotFound, in one query either way.
	DocumentIn(ctx context.Context, id service.ID, kbIDs []service.ID) (*service.Document, error)
	Documents(ctx context.Context, kbID, before service.ID, limit int) ([]*service.Document, error)
	DocumentBlob(ctx context.Context, sha256 string) ([]byte, error)
	DocumentChunks(ctx context.Context, docID service.ID, afterOrdinal, limit int) ([]service.Chunk, error)
	// ChunkIn is one chunk when it is in one of kbIDs, else
	// service.ErrNotFound, in one query either way.
	ChunkIn(ctx context.Context, id service.ID, kbIDs []service.ID) (*service.Chunk, error)
	DeleteDocument(ctx context.Context, id service.ID) error
	Reindex(ctx context.Context, id service.ID, outbox func(*service.Document) service.OutboxMessage) (*service.Document, error)
	ClaimDocument(ctx context.Context, id service.ID, generation int) (*service.Document, error)
	FailDocument(ctx context.Context, id service.ID, generation int, reason string) error
	ReplaceChunks(ctx context.Context, docID service.ID, generation int, space string, chunks []service.Chunk) error
	ReembedStore
	StuckDocuments(ctx context.Context, cutoff time.Time, limit int) ([]*service.Document, error)
	Requeue(ctx context.Context, d *service.Document, msg service.OutboxMessage) (bool, error)
	RepublishPending(ctx context.Context, cutoff time.Time, limit int, queue service.MessageFor) (int, error)
	// RelayOutbox publishes rows that go out at once; RelayIngest those
	// that wait for their knowledge base's turn, keeping at most perKB of
	// its documents in flight across instances.
	RelayOutbox(ctx context.Context, limit int, publish func(context.Context, service.OutboxMessage) (ref string, err error)) (sent, failed int, err error)
	RelayIngest(ctx context.Context, perKB, limit int, publish func(context.Context, service.OutboxMessage) (ref string, err error)) (sent, failed int, err error)
	// CheckSent asks holds about ingest messages sent before cutoff whose
	// document still waits, and makes those the MQ lost unsent again.
	CheckSent(ctx context.Context, cutoff time.Time, limit int, holds func(ctx context.Context, ref string) (bool, error)) (resent int, err error)
	PruneOutbox(ctx context.Context, sentBefore time.Time, limit int) (int, error)
	// Pipelines (pipeline.go, fetch.go).
	FindDocuments(ctx context.Context, kbID service.ID, q service.DocumentQuery) ([]*service.Document, error)
	PutVersion(ctx context.Context, d *service.Document, blob []byte, queue service.MessageFor) (*service.Document, bool, error)
	Import(ctx context.Context, d *service.Document, src service.DocumentSource) (*service.Document, error)
	ClaimDueSources(ctx context.Context, lease time.Duration, limit, perKB int) ([]*service.Document, error)
	FinishFetch(ctx context.Context, docID service.ID, f service.Fetched, queue service.MessageFor) (*service.Document, error)
}

// Publisher sends a message to the MQ.
type Publisher interface {
	Publish(ctx context.Context, topic, key string, body []byte) error
}

// Tracker is a Publisher whose queue may lose a publication it has
// acknowledged — Redis Streams, whose replication is asynchronous, after a
// failover — and can tell: PublishTracked names the stored message, Holds
// says later whether the queue still has it. The relay then sends a lost
// ingest message again within ConfirmAfter instead of PendingTimeout.
type Tracker interface {
	PublishTracked(ctx context.Context, topic, key string, body []byte) (ref string, err error)
	Holds(ctx context.Context, topic, ref string) (bool, error)
}

// ErrGaveUp marks a transient failure that was retried MaxAttempts times:
// the document is marked failed and the message should be dead-lettered.
var ErrGaveUp = errors.New("ingestion gave up")

// Config tunes the pipeline. Zero values take the defaults.
type Config struct {
	MaxBytes       int64         // upload cap; default 50 MiB
	Limits         parse.Limits  // parser limits, the text cap among them
	MaxChunks      int           // chunks per document; default 20,000
	Parser         parse.Parser  // where files are parsed; default InProcess
	MaxAttempts    int           // transient failures before giving up; default 5
	RunningTimeout time.Duration // a document running longer is re-queued; default 15m
	// PendingTimeout is how long a document may stay pending after its
	// message was published before it is published again (the MQ may have
	// lost it); default 10m.
	PendingTimeout time.Duration
	RelayInterval  time.Duration // outbox poll; default 1s
	// ConfirmAfter is how long after its publication, and then how often
	// while its document waits, the relay asks a Tracker whether it still
	// holds an ingest message (RAGENT_INGEST_CONFIRM_AFTER); default 10s.
	ConfirmAfter time.Duration
	// ReaperInterval is the reaper's period; default 1m, or half of
	// PendingTimeout when that is shorter.
	ReaperInterval time.Duration
	EmbedBatch     int // texts per Embed call; default 64
	// Space is the embedding space the embedder makes (docs/embeddings.md "Embedding
	// model changes"); zero takes the embedder's model and dimension with
	// no prefixes.
	Space service.EmbeddingSpace
	// OutboxRetention is how long sent outbox rows are kept (to trace what
	// was published) before the reaper deletes them; default 7 days.
	OutboxRetention time.Duration
	PruneBatch      int // outbox rows deleted per statement; default 1000

	// Registerer receives the pipeline's metrics (observe.go); nil keeps
	// them unregistered. Tracer makes the spans of an upload and of a
	// document's ingestion; nil makes none.
	Registerer prometheus.Registerer
	Tracer     trace.Tracer

	// URL imports: where fetches may go, how long one may take (default
	// 30s), the shortest refresh interval (default 1m), and how often the
	// fetcher looks for due documents written by other instances (default
	// 5s, or MinRefresh when shorter). The size cap is MaxBytes.
	Net           NetPolicy
	FetchTimeout  time.Duration
	MinRefresh    time.Duration
	FetchInterval time.Duration
	// Webhooks: attempts per event before it is dead-lettered (default 8)
	// and the wait before the first retry, doubled each time (default 2s).
	WebhookMaxAttempts int
	WebhookBackoff     time.Duration
	Logger             *slog.Logger     // nil discards
	Now                func() time.Time // nil is time.Now

	// Fetches run FetchConcurrency at once per instance (default 8), at
	// most FetchPerKB of one knowledge base across instances (default 2).
	FetchConcurrency int
	FetchPerKB       int
	// Webhooks delivered to at once per instance (default 8), and how long
	// failed and skipped deliveries are kept (default 30 days).
	WebhookConcurrency       int
	WebhookDeliveryRetention time.Duration

	// WorkConcurrency caps the documents parsed, chunked and embedded at
	// once per instance (0: no cap beyond the MQ handlers'). With more MQ
	// handlers than that, the others wait in the commit's path (the
	// OpenSearch backend's shared bulk write) without adding parse
	// processes or CPU work.
	WorkConcurrency int
	// Handlers is the MQ's ingestion handlers per instance (the driver's
	// configuration). The relay keeps at most max(16, 2 × Handlers) of a
	// knowledge base's documents in flight; InFlightPerKB, when set,
	// replaces that bound (tests).
	Handlers      int
	InFlightPerKB int
}

// inFlightPerKB is the relay's bound on a knowledge base's documents in
// flight: enough to keep every handler busy with one knowledge base
// alone, few enough that another's upload is next in the queue.
func (c *Config) inFlightPerKB() int {
	if c.InFlightPerKB > 0 {
		return c.InFlightPerKB
	}
	return max(16, 2*c.Handlers)
}

func (c *Config) defaults() {
	c.MaxBytes = cmp.Or(max(c.MaxBytes, 0), 50<<20)
	c.MaxChunks = cmp.Or(max(c.MaxChunks, 0), 20_000)
	if c.Parser == nil {
		c.Parser = parse.InProcess{}
	}
	c.MaxAttempts = cmp.Or(max(c.MaxAttempts, 0), 5)
	c.RunningTimeout = cmp.Or(max(c.RunningTimeout, 0), 15*time.Minute)
	c.PendingTimeout = cmp.Or(max(c.PendingTimeout, 0), 10*time.Minute)
	c.RelayInterval = cmp.Or(max(c.RelayInterval, 0), time.Second)
	c.ConfirmAfter = cmp.Or(max(c.ConfirmAfter, 0), 10*time.Second)
	c.ReaperInterval = cmp.Or(max(c.ReaperInterval, 0), min(time.Minute, c.PendingTimeout/2))
	c.EmbedBatch = cmp.Or(max(c.EmbedBatch, 0), 64)
	c.OutboxRetention = cmp.Or(max(c.OutboxRetention, 0), 7*24*time.Hour)
	c.PruneBatch = cmp.Or(max(c.PruneBatch, 0), 1000)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Now == nil {
		c.Now = time.Now
	}
	c.FetchTimeout = cmp.Or(max(c.FetchTimeout, 0), 30*time.Second)
	c.MinRefresh = cmp.Or(max(c.MinRefresh, 0), time.Minute)
	c.WebhookMaxAttempts = cmp.Or(max(c.WebhookMaxAttempts, 0), 8)
	c.WebhookBackoff = cmp.Or(max(c.WebhookBackoff, 0), 2*time.Second)
	c.FetchConcurrency = cmp.Or(max(c.FetchConcurrency, 0), 8)
	c.FetchPerKB = cmp.Or(max(c.FetchPerKB, 0), 2)
	c.WebhookConcurrency = cmp.Or(max(c.WebhookConcurrency, 0), 8)
	c.WebhookDeliveryRetention = cmp.Or(max(c.WebhookDeliveryRetention, 0), 30*24*time.Hour)
	// Often enough that the shortest refresh is kept.
	c.FetchInterval = cmp.Or(max(c.FetchInterval, 0), min(5*time.Second, c.MinRefresh))
}

// Service runs uploads and ingestion.
type Service struct {
	work     *workSlots // WorkConcurrency's slots; nil without a cap
	store    Store
	access   *service.Access
	embedder service.Embedder
	ids      service.IDGenerator
	audit    *service.Auditor
	cfg      Config
	log      *slog.Logger
	now      func() time.Time
	kick     chan struct{} // wakes the relay after an upload on this instance
	fetchNow chan struct{} // wakes the fetcher after an import on this instance
	client   *http.Client  // URL imports, under cfg.Net
	// Webhooks (webhooks.go), off until EnableWebhooks.
	hooks      WebhookStore
	sealer     sealer
	hookClient *http.Client
	// The external search engine (searchindex.go), off until
	// EnableSearchIndex.
	search *searchIndex
	// Chunk curation (curate.go), off until EnableCuration.
	curation CurationStore
	metrics  *metrics
	tracer   trace.Tracer
}

// New returns a Service. access decides who may read and change the
// documents of a knowledge base; uploads, deletes and reindexes are recorded
// in audit.
func New(store Store, access *service.Access, embedder service.Embedder, ids service.IDGenerator, audit *service.Auditor, cfg Config) *Service {
	cfg.defaults()
	if cfg.Space == (service.EmbeddingSpace{}) && embedder != nil {
		cfg.Space = service.EmbeddingSpace{Model: embedder.Model(), Dim: embedder.Dim()}
	}
	m := newMetrics(cfg.Registerer)
	var work *workSlots
	if cfg.WorkConcurrency > 0 {
		work = newWorkSlots(cfg.WorkConcurrency)
	}
	return &Service{work: work, store: store, access: access, embedder: embedder, ids: ids, audit: audit, cfg: cfg, log: cfg.Logger, now: cfg.Now, kick: make(chan struct{}, 1),
		fetchNow: make(chan struct{}, 1), client: m.measure(cfg.Net.Client(cfg.FetchTimeout), "fetch"),
		metrics: m, tracer: tracerOr(cfg.Tracer)}
}

// wake signals a loop waiting on ch, a channel of capacity 1, without
// blocking: a signal already pending wakes the loop for this one too.
func wake(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// EnableWebhooks turns on webhooks, kept in store, their secrets sealed
// with a key derived from key (the auth signing secret). Call it before
// the service is used.
func (s *Service) EnableWebhooks(store WebhookStore, key []byte) {
	s.hooks, s.sealer = store, newSealer(key)
	s.hookClient = s.metrics.measure(s.cfg.Net.Client(s.cfg.FetchTimeout), "webhook")
	// A receiver's redirect is a failed delivery, not a new destination.
	s.hookClient.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
}
