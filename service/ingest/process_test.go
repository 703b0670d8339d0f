package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest/parse"
)

// fakeStore serves one document and records what Process does with it.
type fakeStore struct {
	Store     // the methods Process does not call panic through the nil interface
	kb        service.KnowledgeBase
	doc       service.Document
	blob      []byte
	replace   func() error // what ReplaceChunks answers
	failed    []string     // FailDocument reasons
	replaced  int
	lastCount int
}

func (s *fakeStore) KnowledgeBaseSettings(context.Context, []service.ID) ([]*service.KnowledgeBase, error) {
	kb := s.kb
	return []*service.KnowledgeBase{&kb}, nil
}

func (s *fakeStore) ClaimDocument(_ context.Context, id service.ID, generation int) (*service.Document, error) {
	s.doc.Attempts++
	d := s.doc
	return &d, nil
}

func (s *fakeStore) DocumentBlob(context.Context, string) ([]byte, error) { return s.blob, nil }

func (s *fakeStore) ReplaceChunks(_ context.Context, _ service.ID, _ int, _ string, chunks []service.Chunk) error {
	s.replaced++
	s.lastCount = len(chunks)
	return s.replace()
}

func (s *fakeStore) FailDocument(_ context.Context, _ service.ID, _ int, reason string) error {
	s.failed = append(s.failed, reason)
	return nil
}

type fakeEmbedder struct{}

func (fakeEmbedder) Embed(_ context.Context, _ service.EmbedKind, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{1, 0}
	}
	return out, nil
}
func (fakeEmbedder) Model() string { return "fake" }
func (fakeEmbedder) Dim() int      { return 2 }

type counterIDs struct{ n service.ID }

func (c *counterIDs) NextID() (service.ID, error) { c.n++; return c.n, nil }

func newFakeStore(content string) *fakeStore {
	return &fakeStore{
		kb:      service.KnowledgeBase{ID: 1, EmbeddingModel: "fake", EmbeddingDim: 2, ChunkSize: 64, ChunkOverlap: 0},
		doc:     service.Document{ID: 7, KnowledgeBaseID: 1, Mime: parse.MimeText, Generation: 1, SHA256: "x"},
		blob:    []byte(content),
		replace: func() error { return nil },
	}
}

func processOnce(t *testing.T, svc *Service) error {
	t.Helper()
	body, _ := json.Marshal(service.IngestMessage{DocumentID: 7, Generation: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return svc.Process(ctx, body)
}

// A database error the repository classifies as permanent (Postgres
// refusing the data) fails the document on the first attempt: no retry, no
// dead letter. A transient one is still retried.
func TestProcessPermanentStoreErrorFailsAtOnce(t *testing.T) {
	permanent := fmt.Errorf("%w: %w: postgres refused the data: index row requires 40040 bytes (SQLSTATE 54000)", service.ErrInvalid, service.ErrPermanent)
	store := newFakeStore("Some ordinary text to index.")
	store.replace = func() error { return permanent }
	svc := New(store, nil, fakeEmbedder{}, &counterIDs{}, nil, Config{MaxAttempts: 5})
	if err := processOnce(t, svc); err != nil {
		t.Fatalf("Process = %v, want nil (done with, failed for good)", err)
	}
	if len(store.failed) != 1 || !strings.Contains(store.failed[0], "SQLSTATE 54000") || store.doc.Attempts != 1 {
		t.Fatalf("failed %q after %d attempts, want one failure on the first", store.failed, store.doc.Attempts)
	}

	transient := newFakeStore("Some ordinary text to index.")
	transient.replace = func() error { return errors.New("connection reset") }
	svc = New(transient, nil, fakeEmbedder{}, &counterIDs{}, nil, Config{MaxAttempts: 5})
	if err := processOnce(t, svc); err == nil || errors.Is(err, ErrGaveUp) || len(transient.failed) != 0 {
		t.Fatalf("transient: Process = %v, failed %q; want a retryable error", err, transient.failed)
	}
}

// A document making more chunks than the cap fails with a reason naming it,
// before anything is embedded or stored.
func TestProcessChunkCap(t *testing.T) {
	store := newFakeStore(strings.Repeat("A paragraph of several words that fills a small chunk nicely.\n\n", 200))
	svc := New(store, nil, fakeEmbedder{}, &counterIDs{}, nil, Config{MaxChunks: 50})
	if err := processOnce(t, svc); err != nil {
		t.Fatal(err)
	}
	if len(store.failed) != 1 || !strings.Contains(store.failed[0], "more than 50 chunks") || store.replaced != 0 {
		t.Fatalf("failed %q, replaced %d times; want the chunk cap", store.failed, store.replaced)
	}
	// At the cap it is fine.
	store = newFakeStore(strings.Repeat("A paragraph of several words that fills a small chunk nicely.\n\n", 20))
	svc = New(store, nil, fakeEmbedder{}, &counterIDs{}, nil, Config{MaxChunks: 50})
	if err := processOnce(t, svc); err != nil || len(store.failed) != 0 || store.replaced != 1 {
		t.Fatalf("err %v, failed %q", err, store.failed)
	}
}
