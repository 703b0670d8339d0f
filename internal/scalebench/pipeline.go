package scalebench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/service"
)

// IngestStats is what one pipeline run ingested.
type IngestStats struct {
	Documents, Failed, Chunks int
	Elapsed                   time.Duration
}

// ChunksPerSecond is the pipeline's pace over the whole run.
func (s IngestStats) ChunksPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Chunks) / s.Elapsed.Seconds()
}

// Ingest uploads corpus documents [from, from+n) into kb through the
// ingestion use case (upload → outbox → relay → MQ → parse → embed → store)
// with uploaders concurrent uploads, and waits until every one is ready or
// failed. The knowledge base may already hold documents: only the new ones
// are counted, and only they are read while waiting (newest first, so the
// poll costs the same at 10k documents as at 1M and does not take the
// machine's time from the pipeline it measures).
func Ingest(ctx context.Context, svc eval.Ingester, gen *Generator, kb service.ID, from, n, uploaders int) (IngestStats, error) {
	var (
		mu       sync.Mutex
		uploaded = make(map[service.ID]bool, n)
		oldest   = service.ID(math.MaxInt64)
	)
	start := time.Now()
	err := fanOut(ctx, uploaders, from, from+n, 1, func(ctx context.Context, i int) error {
		d := gen.Doc(i)
		doc, err := svc.Upload(ctx, service.SystemPrincipal(), kb, d.ID+".txt", strings.NewReader(d.Text))
		if err != nil {
			return fmt.Errorf("scalebench: upload %s: %w", d.ID, err)
		}
		mu.Lock()
		uploaded[doc.ID], oldest = true, min(oldest, doc.ID)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return IngestStats{}, err
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := settled(ctx, svc, kb, uploaded, oldest)
		if err != nil {
			return IngestStats{}, err
		}
		if st.Documents+st.Failed >= len(uploaded) {
			st.Elapsed = time.Since(start)
			return st, nil
		}
		select {
		case <-ctx.Done():
			return IngestStats{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// settled counts the documents of ids that are ready (and their chunks) or
// failed, reading kb's documents newest first only down to oldest, the
// smallest of ids.
func settled(ctx context.Context, svc eval.Ingester, kb service.ID, ids map[service.ID]bool, oldest service.ID) (IngestStats, error) {
	var st IngestStats
	var before service.ID
	for {
		page, err := svc.Documents(ctx, service.SystemPrincipal(), kb, before, 1000)
		if err != nil {
			return IngestStats{}, err
		}
		for _, d := range page {
			if !ids[d.ID] {
				continue
			}
			switch d.Status {
			case service.DocumentReady:
				st.Documents++
				st.Chunks += d.ChunkCount
			case service.DocumentFailed:
				st.Failed++
			}
		}
		if len(page) < 1000 || page[len(page)-1].ID <= oldest {
			return st, nil
		}
		before = page[len(page)-1].ID
	}
}
