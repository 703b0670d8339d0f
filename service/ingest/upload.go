package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest/parse"
)

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
