package scalebench

import (
	"context"
	"io"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// memIngester is a knowledge base in memory whose documents become ready
// when the test says so; it counts the rows Documents returns.
type memIngester struct {
	mu    sync.Mutex
	docs  []*service.Document // oldest first
	polls int                 // calls from the newest document (before = 0)
	rows  int                 // rows returned
}

func (m *memIngester) Upload(_ context.Context, _ service.Principal, kb service.ID, _ string, _ io.Reader) (*service.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := &service.Document{ID: service.ID(len(m.docs) + 1), KnowledgeBaseID: kb, Status: service.DocumentPending}
	m.docs = append(m.docs, d)
	return d, nil
}

func (m *memIngester) Documents(_ context.Context, _ service.Principal, _, before service.ID, limit int) ([]*service.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var page []*service.Document
	for _, d := range slices.Backward(m.docs) {
		if before != 0 && d.ID >= before {
			continue
		}
		c := *d
		page = append(page, &c)
		if len(page) == limit {
			break
		}
	}
	if before == 0 {
		m.polls++
	}
	m.rows += len(page)
	return page, nil
}

// settle marks every pending document ready with two chunks, except every
// tenth, which fails.
func (m *memIngester) settle() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.docs {
		if d.Status != service.DocumentPending {
			continue
		}
		if d.ID%10 == 0 {
			d.Status = service.DocumentFailed
		} else {
			d.Status, d.ChunkCount = service.DocumentReady, 2
		}
	}
}

func TestIngestCountsOnlyItsDocumentsAndReadsOnlyThem(t *testing.T) {
	const existing, n = 25_000, 1_500
	m := &memIngester{}
	for range existing {
		m.docs = append(m.docs, &service.Document{ID: service.ID(len(m.docs) + 1), Status: service.DocumentReady, ChunkCount: 1})
	}
	m.docs[existing-1].Status = service.DocumentFailed // an old failure is not ours
	gen := newGen(t, Spec{Lang: "en", Docs: existing + n, Queries: 1, Seed: 1})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	var (
		st  IngestStats
		err error
	)
	go func() {
		defer close(done)
		st, err = Ingest(ctx, m, gen, 1, existing, n, 4)
	}()
	// Let the poll see its documents unsettled at least once before they settle.
	for {
		m.mu.Lock()
		uploaded, polled := len(m.docs) == existing+n, m.polls > 0
		m.mu.Unlock()
		if uploaded && polled {
			break
		}
		select {
		case <-done:
			t.Fatalf("Ingest returned before its documents settled: %+v, %v", st, err)
		default:
			runtime.Gosched()
		}
	}
	m.settle()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	wantFailed := n / 10
	if st.Documents != n-wantFailed || st.Failed != wantFailed || st.Chunks != 2*(n-wantFailed) {
		t.Errorf("stats = %+v, want %d ready with %d chunks and %d failed", st, n-wantFailed, 2*(n-wantFailed), wantFailed)
	}
	// One page past the oldest new document at most: the old ones are not read.
	if limit := m.polls * (n + 1000); m.rows > limit {
		t.Errorf("%d polls read %d rows, more than %d: they page through the %d old documents", m.polls, m.rows, limit, existing)
	}
}
