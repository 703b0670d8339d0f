package scalebench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest"
	"github.com/ragent-go/ragent/service/ingest/parse"
	"github.com/ragent-go/ragent/text"
)

// Store is what the bulk loader needs: the upload row, the claim and the
// chunk-writing method ingestion itself uses, so bulk-loaded chunks land in
// exactly the index format, and the documents go through exactly the states,
// of the code under test (a search backend that indexes after the commit
// turns a claimed document ready once the engine holds its chunks).
type Store interface {
	CreateUpload(ctx context.Context, d *service.Document, blob []byte, msg service.OutboxMessage) error
	ClaimDocument(ctx context.Context, id service.ID, generation int) (*service.Document, error)
	ReplaceChunks(ctx context.Context, docID service.ID, generation int, space string, chunks []service.Chunk) error
}

// Loader writes corpus documents as chunks without the pipeline: each batch
// of Batch corpus documents becomes one stored document (its file is the
// batch's text) whose chunks are the corpus documents, one chunk each,
// embedded by Embedder and written by one ReplaceChunks call.
type Loader struct {
	Store    Store
	IDs      service.IDGenerator
	Embedder service.Embedder
	Gen      *Generator
	KB       service.ID
	Space    string // the key of KB's embedding space, which Embedder makes
	Batch    int    // corpus documents per stored document; 0 means 1,000
	Workers  int    // batches written at once; 0 means 2
}

// LoadStats says what a Load wrote.
type LoadStats struct {
	Chunks   int
	Postings int64 // distinct (term, chunk) pairs: the keyword index's entries
	Elapsed  time.Duration
}

// Load writes corpus documents [from, to).
func (l *Loader) Load(ctx context.Context, from, to int) (LoadStats, error) {
	batch, workers := l.Batch, l.Workers
	if batch <= 0 {
		batch = 1000
	}
	if workers <= 0 {
		workers = 2
	}
	start := time.Now()
	var postings atomic.Int64
	err := fanOut(ctx, workers, from, to, batch, func(ctx context.Context, s int) error {
		n, err := l.loadBatch(ctx, s, min(s+batch, to))
		postings.Add(n)
		return err
	})
	if err != nil {
		return LoadStats{}, err
	}
	return LoadStats{Chunks: to - from, Postings: postings.Load(), Elapsed: time.Since(start)}, nil
}

// fanOut calls fn for from, from+step, … below to on workers goroutines.
// The first error cancels the rest and is returned.
func fanOut(ctx context.Context, workers, from, to, step int, fn func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, workers))
	for i := from; i < to && gctx.Err() == nil; i += step {
		g.Go(func() error { return fn(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// loadBatch stores corpus documents [from, to) as one document and returns
// the number of postings written.
func (l *Loader) loadBatch(ctx context.Context, from, to int) (int64, error) {
	texts := make([]string, to-from)
	for i := range texts {
		texts[i] = l.Gen.Doc(from + i).Text
	}
	vecs, err := l.Embedder.Embed(ctx, service.EmbedDocument, texts)
	if err != nil {
		return 0, fmt.Errorf("scalebench: embed: %w", err)
	}
	if len(vecs) != len(texts) {
		return 0, fmt.Errorf("scalebench: embed: %d vectors for %d texts", len(vecs), len(texts))
	}
	docID, err := l.IDs.NextID()
	if err != nil {
		return 0, err
	}
	var postings int64
	chunks := make([]service.Chunk, len(texts))
	for i, t := range texts {
		id, err := l.IDs.NextID()
		if err != nil {
			return 0, err
		}
		c := parse.Chunk{Ordinal: i, Content: t, TokenCount: text.CountTokens(t)}
		tf, n := ingest.IndexTerms(c)
		postings += int64(len(tf))
		chunks[i] = service.Chunk{ID: id, DocumentID: docID, KnowledgeBaseID: l.KB, Generation: 1, Ordinal: i,
			Content: t, TokenCount: c.TokenCount, Embedding: vecs[i], Terms: tf, TermCount: n}
	}
	blob := []byte(strings.Join(texts, "\n\n"))
	sum := sha256.Sum256(blob)
	doc := &service.Document{ID: docID, KnowledgeBaseID: l.KB, Name: fmt.Sprintf("scalebench-%09d.txt", from),
		Mime: "text/plain", Size: int64(len(blob)), SHA256: hex.EncodeToString(sum[:]), Status: service.DocumentPending}
	if err := l.Store.CreateUpload(ctx, doc, blob, service.OutboxMessage{}); err != nil {
		return 0, fmt.Errorf("scalebench: document for %s..%s: %w", DocID(from), DocID(to-1), err)
	}
	// No message was queued: the loader is its own worker and claims it.
	if doc, err = l.Store.ClaimDocument(ctx, docID, doc.Generation); err != nil {
		return 0, fmt.Errorf("scalebench: claim the document for %s..%s: %w", DocID(from), DocID(to-1), err)
	}
	if err := l.Store.ReplaceChunks(ctx, docID, doc.Generation, l.Space, chunks); err != nil {
		return 0, fmt.Errorf("scalebench: chunks of %s..%s: %w", DocID(from), DocID(to-1), err)
	}
	return postings, nil
}
