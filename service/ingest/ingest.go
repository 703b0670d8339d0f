// Package ingest is the document pipeline: upload (size cap, content
// sniffing, hashing, blob + document + outbox row in one transaction), then
// on a worker parse → chunk → embed → index (the file reading itself is
// package parse), and the document lifecycle
// around it (list, delete, reindex, chunk preview, the outbox relay, and the
// reaper of stuck documents and of sent outbox rows past their retention),
// the background re-embedding of knowledge bases whose embedding space is
// not the configured one (reembed.go), and, for pipelines (pipeline.go,
// fetch.go, webhooks.go), documents replaced by external id, URL imports
// fetched by a fetcher under an SSRF policy (netguard.go) and refreshed, and
// signed webhooks on ready and failed.
package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest/parse"
	"github.com/ragent-go/ragent/text"
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
	RelayOutbox(ctx context.Context, limit int, publish func(context.Context, service.OutboxMessage) (ref string, err error)) (sent, failed int, err error)
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
}

func (c *Config) defaults() {
	if c.MaxBytes <= 0 {
		c.MaxBytes = 50 << 20
	}
	if c.MaxChunks <= 0 {
		c.MaxChunks = 20_000
	}
	if c.Parser == nil {
		c.Parser = parse.InProcess{}
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.RunningTimeout <= 0 {
		c.RunningTimeout = 15 * time.Minute
	}
	if c.PendingTimeout <= 0 {
		c.PendingTimeout = 10 * time.Minute
	}
	if c.RelayInterval <= 0 {
		c.RelayInterval = time.Second
	}
	if c.ConfirmAfter <= 0 {
		c.ConfirmAfter = 10 * time.Second
	}
	if c.ReaperInterval <= 0 {
		c.ReaperInterval = min(time.Minute, c.PendingTimeout/2)
	}
	if c.EmbedBatch <= 0 {
		c.EmbedBatch = 64
	}
	if c.OutboxRetention <= 0 {
		c.OutboxRetention = 7 * 24 * time.Hour
	}
	if c.PruneBatch <= 0 {
		c.PruneBatch = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = 30 * time.Second
	}
	if c.MinRefresh <= 0 {
		c.MinRefresh = time.Minute
	}
	if c.WebhookMaxAttempts <= 0 {
		c.WebhookMaxAttempts = 8
	}
	if c.WebhookBackoff <= 0 {
		c.WebhookBackoff = 2 * time.Second
	}
	if c.FetchConcurrency <= 0 {
		c.FetchConcurrency = 8
	}
	if c.FetchPerKB <= 0 {
		c.FetchPerKB = 2
	}
	if c.WebhookConcurrency <= 0 {
		c.WebhookConcurrency = 8
	}
	if c.WebhookDeliveryRetention <= 0 {
		c.WebhookDeliveryRetention = 30 * 24 * time.Hour
	}
	if c.FetchInterval <= 0 {
		// Often enough that the shortest refresh is kept.
		c.FetchInterval = min(5*time.Second, c.MinRefresh)
	}
}

// Service runs uploads and ingestion.
type Service struct {
	work     chan struct{} // WorkConcurrency's slots; nil without a cap
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
	var work chan struct{}
	if cfg.WorkConcurrency > 0 {
		work = make(chan struct{}, cfg.WorkConcurrency)
	}
	return &Service{work: work, store: store, access: access, embedder: embedder, ids: ids, audit: audit, cfg: cfg, log: cfg.Logger, now: cfg.Now, kick: make(chan struct{}, 1),
		fetchNow: make(chan struct{}, 1), client: m.measure(cfg.Net.Client(cfg.FetchTimeout), "fetch"),
		metrics: m, tracer: tracerOr(cfg.Tracer)}
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

// Upload stores a file for ingestion and returns its pending document. The
// body is read up to the size cap; a file whose type cannot be ingested is
// still recorded, as a failed document with a readable error, so the admin
// sees what happened to it. The same content in the same knowledge base is
// a service.ErrConflict carrying the existing document's id. Uploading
// needs the editor role on the knowledge base.
func (s *Service) Upload(ctx context.Context, p service.Principal, kbID service.ID, filename string, body io.Reader) (_ *service.Document, err error) {
	// The upload's span is the parent of the document's ingestion, through
	// the traceparent in the ingest message.
	ctx, span := s.tracer.Start(ctx, "ingest.upload", trace.WithAttributes(attribute.String("ragent.kb", kbID.String())))
	defer func() { endSpan(span, err) }()
	ev := service.AuditEvent{Action: service.AuditDocumentUpload, TargetType: service.TargetDocument, Detail: "kb=" + kbID.String()}
	// The body is read outside the transaction: a slow client must not hold
	// a database connection.
	doc, blob, msg, err := s.prepareUpload(ctx, p, kbID, filename, body)
	if err != nil {
		s.audit.Fail(ctx, ev, err)
		return nil, err
	}
	ev.TargetID, ev.Detail = doc.ID.String(), fmt.Sprintf("kb=%s name=%s size=%d", kbID, doc.Name, doc.Size)
	err = s.audit.Do(ctx, ev, func(ctx context.Context, _ *service.AuditEvent) error {
		return s.store.CreateUpload(ctx, doc, blob, msg)
	})
	if err != nil {
		return nil, err
	}
	s.wakeRelay()
	return doc, nil
}

func (s *Service) prepareUpload(ctx context.Context, p service.Principal, kbID service.ID, filename string, body io.Reader) (*service.Document, []byte, service.OutboxMessage, error) {
	var msg service.OutboxMessage
	doc, blob, err := s.readUpload(ctx, p, kbID, filename, body)
	if err != nil {
		return nil, nil, msg, err
	}
	if doc.Status == service.DocumentPending {
		if msg, err = s.tracedIngestMessage(ctx, doc.ID, 1); err != nil {
			return nil, nil, msg, err
		}
	}
	return doc, blob, msg, nil
}

// readUpload checks that p may upload into the knowledge base and reads the
// file into a new document: pending, or failed when its type cannot be
// ingested.
func (s *Service) readUpload(ctx context.Context, p service.Principal, kbID service.ID, filename string, body io.Reader) (*service.Document, []byte, error) {
	if _, err := s.access.Require(ctx, p, kbID, service.KBEditor); err != nil {
		return nil, nil, err
	}
	name, err := cleanName(filename)
	if err != nil {
		return nil, nil, err
	}
	blob, err := io.ReadAll(io.LimitReader(body, s.cfg.MaxBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading the upload failed: %w", service.ErrInvalid, err)
	}
	if int64(len(blob)) > s.cfg.MaxBytes {
		return nil, nil, service.UploadTooLarge(s.cfg.MaxBytes)
	}
	id, err := s.ids.NextID()
	if err != nil {
		return nil, nil, err
	}
	doc := newVersion(id, kbID, name, blob)
	doc.CreatedBy = p.UserID
	return doc, blob, nil
}

// newVersion describes blob as a document: pending with its sniffed type,
// or failed when its type cannot be ingested (recorded so the user sees
// what happened, and never queued: a worker would fail it the same way).
func newVersion(id, kbID service.ID, name string, blob []byte) *service.Document {
	sum := sha256.Sum256(blob)
	doc := &service.Document{ID: id, KnowledgeBaseID: kbID, Name: name, Size: int64(len(blob)),
		SHA256: hex.EncodeToString(sum[:]), Status: service.DocumentPending}
	mime, sniffErr := parse.SniffReaderAt(bytes.NewReader(blob), int64(len(blob)), name)
	if sniffErr == nil {
		doc.Mime = mime
	} else {
		doc.Mime, doc.Status, doc.Error = "application/octet-stream", service.DocumentFailed, sniffErr.Error()
	}
	return doc
}

// CheckUpload tells early whether p may upload into a knowledge base, so
// the HTTP layer can refuse before reading a large body; Upload checks
// again, and that check is the one that counts.
// A refusal here is the upload's audit event (Upload is not called then).
func (s *Service) CheckUpload(ctx context.Context, p service.Principal, kbID service.ID) error {
	_, err := s.access.Require(ctx, p, kbID, service.KBEditor)
	if err != nil {
		s.audit.Fail(ctx, service.AuditEvent{Action: service.AuditDocumentUpload, TargetType: service.TargetDocument,
			Detail: "kb=" + kbID.String()}, err)
	}
	return err
}

// cleanName keeps the base name of an uploaded file, as valid UTF-8.
func cleanName(filename string) (string, error) {
	name := path.Base(strings.ReplaceAll(strings.TrimSpace(filename), "\\", "/"))
	if name == "." || name == "/" || name == "" {
		return "", service.Errorf(service.ErrInvalid, "the file needs a name")
	}
	name = strings.ToValidUTF8(name, "?")
	if utf8.RuneCountInString(name) > 255 {
		name = string([]rune(name)[:255])
	}
	return name, nil
}

func (s *Service) ingestMessage(docID service.ID, generation int) (service.OutboxMessage, error) {
	return s.outboxIngest(service.IngestMessage{DocumentID: docID, Generation: generation})
}

// tracedIngestMessage is ingestMessage continuing ctx's trace on the worker.
func (s *Service) tracedIngestMessage(ctx context.Context, docID service.ID, generation int) (service.OutboxMessage, error) {
	return s.outboxIngest(service.IngestMessage{DocumentID: docID, Generation: generation, TraceParent: traceParent(ctx)})
}

func (s *Service) outboxIngest(m service.IngestMessage) (service.OutboxMessage, error) {
	id, err := s.ids.NextID()
	if err != nil {
		return service.OutboxMessage{}, err
	}
	body, err := json.Marshal(m)
	if err != nil {
		return service.OutboxMessage{}, err
	}
	return service.OutboxMessage{ID: id, Topic: service.IngestTopic, Key: fmt.Sprintf("%d:%d", m.DocumentID, m.Generation), Payload: body}, nil
}

// document returns a document when p holds at least need on its knowledge
// base. A document p cannot read is reported as not found, like one that
// does not exist.
func (s *Service) document(ctx context.Context, p service.Principal, id service.ID, need service.KBRole) (*service.Document, error) {
	// Read access first, then the document among what p reads: a document
	// of a knowledge base p cannot read costs the same two queries and
	// answers the same 404 as an id that does not exist, so neither the
	// answer nor its timing tells them apart.
	roles, err := s.access.Roles(ctx, p, nil)
	if err != nil {
		return nil, err
	}
	readable := make([]service.ID, 0, len(roles))
	for kb := range roles {
		readable = append(readable, kb)
	}
	doc, err := s.store.DocumentIn(ctx, id, readable)
	if errors.Is(err, service.ErrNotFound) {
		return nil, service.Errorf(service.ErrNotFound, "document %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	if r := roles[doc.KnowledgeBaseID]; !r.AtLeast(need) {
		return nil, service.Errorf(service.ErrForbidden, "this needs the %s role on knowledge base %s (you are %s)", need, doc.KnowledgeBaseID, r)
	}
	return doc, nil
}

// Document returns one document (viewers of its knowledge base).
func (s *Service) Document(ctx context.Context, p service.Principal, id service.ID) (*service.Document, error) {
	return s.document(ctx, p, id, service.KBViewer)
}

// Documents lists a knowledge base's documents, newest first (viewers).
func (s *Service) Documents(ctx context.Context, p service.Principal, kbID, before service.ID, limit int) ([]*service.Document, error) {
	if _, err := s.access.Require(ctx, p, kbID, service.KBViewer); err != nil {
		return nil, err
	}
	return s.store.Documents(ctx, kbID, before, limit)
}

// Chunks returns a document's chunks in order, for preview (viewers).
func (s *Service) Chunks(ctx context.Context, p service.Principal, docID service.ID, afterOrdinal, limit int) ([]service.Chunk, error) {
	if _, err := s.document(ctx, p, docID, service.KBViewer); err != nil {
		return nil, err
	}
	return s.store.DocumentChunks(ctx, docID, afterOrdinal, limit)
}

// Chunk returns one chunk (viewers of its knowledge base). Like document, a
// chunk of a knowledge base p cannot read is not found, for the same cost.
func (s *Service) Chunk(ctx context.Context, p service.Principal, id service.ID) (*service.Chunk, error) {
	readable, err := s.access.Readable(ctx, p)
	if err != nil {
		return nil, err
	}
	c, err := s.store.ChunkIn(ctx, id, readable)
	if errors.Is(err, service.ErrNotFound) {
		return nil, service.Errorf(service.ErrNotFound, "chunk %s not found", id)
	}
	return c, err
}

// Delete removes a document from search at once (editors).
func (s *Service) Delete(ctx context.Context, p service.Principal, id service.ID) error {
	ev := service.AuditEvent{Action: service.AuditDocumentDelete, TargetType: service.TargetDocument, TargetID: id.String()}
	return s.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		doc, err := s.document(ctx, p, id, service.KBEditor)
		if err != nil {
			return err
		}
		ev.Detail = fmt.Sprintf("kb=%s name=%s", doc.KnowledgeBaseID, doc.Name)
		return s.store.DeleteDocument(ctx, id)
	})
}

// Reindex builds a new generation of a document's chunks; the current ones
// stay searchable until the new ones replace them in one transaction
// (editors).
func (s *Service) Reindex(ctx context.Context, p service.Principal, id service.ID) (*service.Document, error) {
	ev := service.AuditEvent{Action: service.AuditDocumentReindex, TargetType: service.TargetDocument, TargetID: id.String()}
	doc, err := service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, ev *service.AuditEvent) (*service.Document, error) {
		doc, err := s.reindex(ctx, p, id)
		if err == nil {
			ev.Detail = fmt.Sprintf("kb=%s name=%s generation=%d", doc.KnowledgeBaseID, doc.Name, doc.Generation)
		}
		return doc, err
	})
	if err != nil {
		return nil, err
	}
	s.wakeRelay()
	return doc, nil
}

func (s *Service) reindex(ctx context.Context, p service.Principal, id service.ID) (*service.Document, error) {
	doc, err := s.document(ctx, p, id, service.KBEditor)
	if err != nil {
		return nil, err
	}
	if doc.Kind == service.DocumentManual {
		return nil, service.Errorf(service.ErrInvalid, "document %s holds the knowledge base's manual chunks: it has no file to reindex", id)
	}
	if doc.SHA256 == "" {
		return nil, service.Errorf(service.ErrInvalid, "document %s has no content yet: its URL has not been fetched", id)
	}
	var msgErr error
	doc, err = s.store.Reindex(ctx, id, func(d *service.Document) service.OutboxMessage {
		m, err := s.tracedIngestMessage(ctx, d.ID, d.Generation)
		msgErr = err
		return m
	})
	if err == nil {
		err = msgErr
	}
	return doc, err
}

// Process ingests one generation of a document: the MQ consumer's handler.
// It returns nil when the message is done with (ingested, failed for good,
// or stale), ErrGaveUp (wrapped) when retries are exhausted, and other
// errors for transient failures that a redelivery may fix.
func (s *Service) Process(ctx context.Context, body []byte) error {
	var msg service.IngestMessage
	if err := json.Unmarshal(body, &msg); err != nil || msg.DocumentID == 0 || msg.Generation < 1 {
		s.log.ErrorContext(ctx, "dropping malformed ingest message", "body", string(body), "err", err)
		return fmt.Errorf("%w: malformed ingest message", ErrGaveUp)
	}
	// The document's span continues the trace of its upload (or reindex),
	// however long the message waited in the queue.
	ctx, span := s.tracer.Start(withTraceParent(ctx, msg.TraceParent), "ingest.document", trace.WithAttributes(
		attribute.String("ragent.document", msg.DocumentID.String()), attribute.Int("ragent.generation", msg.Generation)))
	if msg.Reembed != "" {
		err := s.reembed(ctx, msg)
		endSpan(span, err)
		return err
	}
	outcome, err := s.process(ctx, msg)
	s.metrics.documents.WithLabelValues(outcome).Inc()
	span.SetAttributes(attribute.String("ragent.outcome", outcome))
	endSpan(span, err)
	return err
}

// process is Process for one build message; it also returns the attempt's
// outcome for ragent_ingest_documents_total.
func (s *Service) process(ctx context.Context, msg service.IngestMessage) (string, error) {
	doc, err := s.store.ClaimDocument(ctx, msg.DocumentID, msg.Generation)
	if errors.Is(err, service.ErrNotFound) {
		s.log.InfoContext(ctx, "skipping stale ingest message", "document", msg.DocumentID, "generation", msg.Generation)
		return outcomeStale, nil
	}
	if err != nil {
		return outcomeRetry, err
	}
	log := s.log.With("document", doc.ID, "generation", doc.Generation, "attempt", doc.Attempts)
	start := s.now()
	n, err := s.index(ctx, doc)
	switch {
	case err == nil:
		log.InfoContext(ctx, "document ingested", "chunks", n, "ms", s.now().Sub(start).Milliseconds())
		s.metrics.chunks.Add(float64(n))
		return outcomeReady, nil
	case errors.Is(err, service.ErrNotFound):
		log.InfoContext(ctx, "document changed during ingestion; result dropped")
		return outcomeStale, nil
	case parse.IsPermanent(err) || errors.Is(err, errMismatch) || errors.Is(err, service.ErrPermanent):
		// Retrying cannot help: the file, the configuration or the data
		// the database refused is the same on every attempt.
		log.WarnContext(ctx, "document failed", "err", err)
		return outcomeFailed, s.store.FailDocument(context.WithoutCancel(ctx), doc.ID, doc.Generation, err.Error())
	case ctx.Err() != nil:
		// Shutting down: leave the message unacknowledged for redelivery.
		return outcomeRetry, err
	case doc.Attempts >= s.cfg.MaxAttempts:
		reason := fmt.Sprintf("gave up after %d attempts: %v", doc.Attempts, err)
		log.ErrorContext(ctx, "document failed", "err", reason)
		if ferr := s.store.FailDocument(ctx, doc.ID, doc.Generation, reason); ferr != nil {
			return outcomeRetry, ferr
		}
		return outcomeFailed, fmt.Errorf("%w: %s", ErrGaveUp, reason)
	default:
		log.WarnContext(ctx, "ingestion failed; will retry", "err", err)
		return outcomeRetry, err
	}
}

var errMismatch = errors.New("embedding model mismatch")

// index parses, chunks, embeds and stores one document generation.
func (s *Service) index(ctx context.Context, doc *service.Document) (int, error) {
	kbs, err := s.store.KnowledgeBaseSettings(ctx, []service.ID{doc.KnowledgeBaseID})
	if err != nil {
		return 0, err
	}
	if len(kbs) == 0 {
		return 0, service.Errorf(service.ErrNotFound, "knowledge base %s not found", doc.KnowledgeBaseID)
	}
	kb := kbs[0]
	if err := s.canEmbed(kb); err != nil {
		return 0, err
	}
	chunks, err := s.prepare(ctx, doc, kb)
	if err != nil {
		return 0, err
	}
	ictx, end := s.stage(ctx, stageIndex)
	if s.search != nil {
		err = s.commitIndexed(ictx, doc, chunks)
	} else {
		err = s.store.ReplaceChunks(ictx, doc.ID, doc.Generation, s.cfg.Space.Key(), chunks)
	}
	end(err)
	if err != nil {
		return 0, err
	}
	return len(chunks), nil
}

// prepare parses, chunks and embeds a document generation, in one of the
// WorkConcurrency slots.
func (s *Service) prepare(ctx context.Context, doc *service.Document, kb *service.KnowledgeBase) ([]service.Chunk, error) {
	if s.work != nil {
		select {
		case s.work <- struct{}{}:
			defer func() { <-s.work }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	pieces, err := s.parseAndSplit(ctx, doc, kb)
	if err != nil {
		return nil, err
	}
	chunks := make([]service.Chunk, len(pieces))
	texts := make([]string, len(pieces))
	for i, p := range pieces {
		id, err := s.ids.NextID()
		if err != nil {
			return nil, err
		}
		tf, n := IndexTerms(p)
		chunks[i] = service.Chunk{ID: id, DocumentID: doc.ID, KnowledgeBaseID: kb.ID, Generation: doc.Generation,
			Ordinal: p.Ordinal, Content: p.Content, Section: p.Section, TokenCount: p.TokenCount, OCR: p.OCR, Terms: tf, TermCount: n}
		texts[i] = p.Content
	}
	ectx, end := s.stage(ctx, stageEmbed)
	ectx = service.WithUsageScope(ectx, service.UsageScope{UserID: doc.CreatedBy, KnowledgeBaseID: kb.ID})
	err = s.embedChunks(ectx, fmt.Sprintf("embed:%s:%d", doc.ID, doc.Generation), chunks, texts)
	end(err)
	if err != nil {
		return nil, err
	}
	return chunks, nil
}

// parseAndSplit turns a document's file into chunks. The file and its
// parsed text are garbage once it returns: only the chunks stay in memory
// while they are embedded and stored.
func (s *Service) parseAndSplit(ctx context.Context, doc *service.Document, kb *service.KnowledgeBase) ([]parse.Chunk, error) {
	blob, err := s.store.DocumentBlob(ctx, doc.SHA256)
	if err != nil {
		return nil, err
	}
	pctx, end := s.stage(ctx, stageParse)
	parsed, err := s.cfg.Parser.Parse(pctx, blob, doc.Mime, s.cfg.Limits)
	end(err)
	if err != nil {
		return nil, err
	}
	_, end = s.stage(ctx, stageChunk)
	pieces := parse.Split(parsed, parse.ChunkOptions{TargetTokens: kb.ChunkSize, OverlapTokens: kb.ChunkOverlap, MaxChunks: s.cfg.MaxChunks})
	end(nil)
	if len(pieces) == 0 {
		return nil, fmt.Errorf("%w: no text to index", parse.ErrEmpty)
	}
	if len(pieces) > s.cfg.MaxChunks {
		return nil, fmt.Errorf("%w: the document makes more than %d chunks, the limit per document", parse.ErrTooLarge, s.cfg.MaxChunks)
	}
	return pieces, nil
}

// canEmbed says whether this worker makes vectors a knowledge base can
// take: those of the space it moves to, or else of its recorded space.
func (s *Service) canEmbed(kb *service.KnowledgeBase) error {
	key := s.cfg.Space.Key()
	if kb.Reembedding != nil && kb.Reembedding.Target.Key() == key || kb.Reembedding == nil && kb.Space().Key() == key {
		return nil
	}
	return fmt.Errorf("%w: the knowledge base is embedded with %s but this worker embeds with %s",
		errMismatch, kb.Space(), s.cfg.Space)
}

// embedChunks fills the chunks' vectors from texts, EmbedBatch at a time.
// callID names the work for usage records; batch i is callID:i, so work
// done again (a redelivered message) is recorded once.
func (s *Service) embedChunks(ctx context.Context, callID string, chunks []service.Chunk, texts []string) error {
	for start := 0; start < len(texts); start += s.cfg.EmbedBatch {
		end := min(start+s.cfg.EmbedBatch, len(texts))
		cctx := service.WithUsageCall(ctx, service.UsageCall{Kind: service.UsageEmbedding, ID: fmt.Sprintf("%s:%d", callID, start)})
		vecs, err := s.embedder.Embed(cctx, service.EmbedDocument, texts[start:end])
		if err != nil {
			return fmt.Errorf("embed: %w", err)
		}
		if len(vecs) != end-start {
			return fmt.Errorf("embed: got %d vectors for %d texts", len(vecs), end-start)
		}
		for i, v := range vecs {
			chunks[start+i].Embedding = v
		}
	}
	return nil
}

func (s *Service) wakeRelay() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// RunRelay publishes outbox rows until ctx ends: at once after an upload on
// this instance, and every RelayInterval for rows written by other instances
// or left behind while the MQ was down.
//
// With a Tracker it also asks, every ConfirmAfter, whether the queue still
// holds the ingest messages whose documents wait, and sends those it lost
// again (confirmSent).
func (s *Service) RunRelay(ctx context.Context, pub Publisher) error {
	t := time.NewTicker(s.cfg.RelayInterval)
	defer t.Stop()
	tracker, _ := pub.(Tracker)
	publish := func(ctx context.Context, m service.OutboxMessage) (string, error) {
		if tracker != nil && m.Topic == service.IngestTopic {
			return tracker.PublishTracked(ctx, m.Topic, m.Key, m.Payload)
		}
		return "", pub.Publish(ctx, m.Topic, m.Key, m.Payload)
	}
	var lastCheck time.Time
	for {
		if tracker != nil && s.now().Sub(lastCheck) >= s.cfg.ConfirmAfter/2 {
			lastCheck = s.now()
			s.confirmSent(ctx, tracker)
		}
		for {
			sent, failed, err := s.store.RelayOutbox(ctx, 100, publish)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "outbox relay failed", "err", err)
			}
			if failed > 0 {
				s.log.WarnContext(ctx, "outbox publish failed; will retry", "sent", sent)
			}
			if err != nil || failed > 0 || sent < 100 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.kick:
		}
	}
}

// confirmSent sends again the ingest messages the queue lost although it
// acknowledged them: a Redis failover promotes a replica that never got the
// last XADDs. Each waiting document's message is asked about every
// ConfirmAfter until the document moves on, so a failover after one check
// is caught by the next.
func (s *Service) confirmSent(ctx context.Context, tracker Tracker) {
	const batch = 100
	holds := func(ctx context.Context, ref string) (bool, error) {
		return tracker.Holds(ctx, service.IngestTopic, ref)
	}
	resent, err := s.store.CheckSent(ctx, s.now().Add(-s.cfg.ConfirmAfter), batch, holds)
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "could not confirm published ingest messages", "err", err)
	}
	if resent > 0 {
		s.log.WarnContext(ctx, "the queue lost published ingest messages (a Redis failover?); sending them again", "messages", resent)
	}
}

// RunReaper re-queues documents stuck in running (their worker died with
// the message lost or dead-lettered) or in pending (the MQ lost their
// message) and prunes the sent outbox every ReaperInterval until ctx ends.
func (s *Service) RunReaper(ctx context.Context) error {
	t := time.NewTicker(s.cfg.ReaperInterval)
	defer t.Stop()
	for {
		if err := s.ReapOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "reaper failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ReapOnce re-queues the documents running since before RunningTimeout,
// re-publishes those pending since before PendingTimeout, deletes the outbox rows sent before OutboxRetention, and switches the
// re-embedded knowledge bases whose remaining documents were deleted.
func (s *Service) ReapOnce(ctx context.Context) error {
	// A failure of one does not hold back the other.
	return errors.Join(s.requeueStuck(ctx), s.republishPending(ctx), s.requeueSearch(ctx), s.pruneOutbox(ctx), s.finishReembeds(ctx))
}

// pruneOutbox deletes sent outbox rows older than the retention, one batch
// per statement until a batch comes back short. Every instance runs it; the
// batches skip rows another instance is deleting.
func (s *Service) pruneOutbox(ctx context.Context) error {
	cutoff := s.now().Add(-s.cfg.OutboxRetention)
	total := 0
	for ctx.Err() == nil {
		n, err := s.store.PruneOutbox(ctx, cutoff, s.cfg.PruneBatch)
		total += n
		if err != nil {
			return fmt.Errorf("prune outbox: %w", err)
		}
		if n < s.cfg.PruneBatch {
			break
		}
	}
	if total > 0 {
		s.log.InfoContext(ctx, "pruned the sent outbox", "rows", total, "sent_before", cutoff)
	}
	// Failed and skipped deliveries are the webhooks' dead letters, kept
	// for their own retention.
	doneCutoff := s.now().Add(-s.cfg.WebhookDeliveryRetention)
	for s.hooks != nil && ctx.Err() == nil {
		n, err := s.hooks.PruneDeliveries(ctx, cutoff, doneCutoff, s.cfg.PruneBatch)
		if err != nil {
			return fmt.Errorf("prune webhook deliveries: %w", err)
		}
		if n < s.cfg.PruneBatch {
			break
		}
	}
	return nil
}

func (s *Service) requeueStuck(ctx context.Context) error {
	stuck, err := s.store.StuckDocuments(ctx, s.now().Add(-s.cfg.RunningTimeout), 100)
	if err != nil {
		return err
	}
	for _, d := range stuck {
		msg, err := s.ingestMessage(d.ID, d.Generation)
		if err != nil {
			return err
		}
		ok, err := s.store.Requeue(ctx, d, msg)
		if err != nil {
			return err
		}
		if ok {
			s.log.WarnContext(ctx, "re-queued a stuck document", "document", d.ID, "generation", d.Generation, "attempts", d.Attempts)
			s.wakeRelay()
		}
	}
	return nil
}

// republishPending re-publishes documents pending for longer than
// PendingTimeout since their message left the outbox: the MQ has lost it
// (Redis restarted without its data) or holds it behind a long backlog. A
// second delivery is harmless: the consume guard drops the message of a
// generation already ingested, the claim one whose document moved on, and
// the chunks' unique key is the last line of defence. At most
// republishRound documents go per round, so a backlog longer than the bound
// grows by a bounded number of duplicates, not by itself.
func (s *Service) republishPending(ctx context.Context) error {
	const batch = 100
	total := 0
	for total < republishRound && ctx.Err() == nil {
		n, err := s.store.RepublishPending(ctx, s.now().Add(-s.cfg.PendingTimeout), batch, s.queue)
		total += n
		if err != nil {
			return fmt.Errorf("re-publish pending documents: %w", err)
		}
		if n < batch {
			break
		}
	}
	if total > 0 {
		s.log.WarnContext(ctx, "re-published documents pending too long; the MQ may have lost their messages",
			"documents", total, "pending_timeout", s.cfg.PendingTimeout)
		s.wakeRelay()
	}
	return nil
}

// republishRound caps the documents one reaper round re-publishes.
const republishRound = 1000

// indexText is what the keyword index sees of a chunk: its text, plus its
// section path when the chunk does not start with it (only a section's
// first chunk repeats its headings), so "VPN > Troubleshooting" still finds
// the third chunk under that heading.
// IndexTerms returns a chunk's keyword-index terms with their frequencies
// and their total (the BM25 document length). The scale benchmark's bulk
// loader calls it too, so bulk-loaded chunks are indexed exactly as
// ingested ones.
func IndexTerms(c parse.Chunk) (map[string]int, int) {
	terms := text.Tokenize(indexText(c))
	tf := make(map[string]int, len(terms))
	for _, t := range terms {
		tf[t]++
	}
	return tf, len(terms)
}

func indexText(c parse.Chunk) string {
	if c.Section == "" {
		return c.Content
	}
	// A section's first chunk opens with its heading lines.
	if head := c.Content[:min(len(c.Content), len(c.Section)+8)]; strings.Contains(head, lastHeading(c.Section)) {
		return c.Content
	}
	return c.Section + "\n" + c.Content
}

func lastHeading(section string) string {
	if i := strings.LastIndex(section, service.SectionSeparator); i >= 0 {
		return section[i+len(service.SectionSeparator):]
	}
	return section
}
