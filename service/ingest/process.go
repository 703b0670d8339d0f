package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest/parse"
	"github.com/ragent-go/ragent/text"
)

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
	if outcome != outcomeRetry {
		// The document left its knowledge base's place in flight: the
		// relay may publish the next one.
		s.wakeRelay()
	}
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
// WorkConcurrency slots (fairslots.go).
func (s *Service) prepare(ctx context.Context, doc *service.Document, kb *service.KnowledgeBase) ([]service.Chunk, error) {
	if s.work != nil {
		release, err := s.work.acquire(ctx, kb.ID)
		if err != nil {
			return nil, err
		}
		defer release()
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

// indexText is what the keyword index sees of a chunk: its text, plus its
// section path when the chunk does not start with it (only a section's
// first chunk repeats its headings), so "VPN > Troubleshooting" still finds
// the third chunk under that heading.
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
