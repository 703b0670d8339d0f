package scalebench

import (
	"context"
	"fmt"
	"strings"
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
// are counted.
func Ingest(ctx context.Context, svc eval.Ingester, gen *Generator, kb service.ID, from, n, uploaders int) (IngestStats, error) {
	before, err := eval.DocumentStats(ctx, svc, kb)
	if err != nil {
		return IngestStats{}, err
	}
	start := time.Now()
	err = fanOut(ctx, uploaders, from, from+n, 1, func(ctx context.Context, i int) error {
		d := gen.Doc(i)
		if _, err := svc.Upload(ctx, service.SystemPrincipal(), kb, d.ID+".txt", strings.NewReader(d.Text)); err != nil {
			return fmt.Errorf("scalebench: upload %s: %w", d.ID, err)
		}
		return nil
	})
	if err != nil {
		return IngestStats{}, err
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := eval.DocumentStats(ctx, svc, kb)
		if err != nil {
			return IngestStats{}, err
		}
		ready, failed := st.Ready-before.Ready, st.Failed-before.Failed
		if ready+failed >= n {
			return IngestStats{Documents: ready, Failed: failed, Chunks: st.Chunks - before.Chunks, Elapsed: time.Since(start)}, nil
		}
		select {
		case <-ctx.Done():
			return IngestStats{}, ctx.Err()
		case <-tick.C:
		}
	}
}
