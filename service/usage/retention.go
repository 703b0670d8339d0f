package usage

import (
	"context"
	"log/slog"
	"time"
)

// Pruner deletes old per-call usage rows.
type Pruner interface {
	// PruneUsageCalls deletes up to limit call records made before t,
	// oldest first, and returns how many it deleted.
	PruneUsageCalls(ctx context.Context, before time.Time, limit int) (int64, error)
}

// Retention keeps the per-call records (usage_calls) for Age: they only
// serve to count a retried call once, and to audit single calls; the
// per-day totals that usage and quotas read (usage_daily) are kept apart
// and are not pruned. A retried call older than Age would be counted again,
// so Age should outlive any retry (ingestion redeliveries take minutes).
type Retention struct {
	Store  Pruner
	Age    time.Duration // 0 keeps every record
	Every  time.Duration // default 1 h
	Batch  int           // rows per DELETE; default 10,000
	Logger *slog.Logger
	Now    func() time.Time
}

// Run prunes at once and then every Every until ctx ends.
func (r Retention) Run(ctx context.Context) {
	if r.Age <= 0 || r.Store == nil {
		return
	}
	every := r.Every
	if every <= 0 {
		every = time.Hour
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if _, err := r.Prune(ctx); err != nil && ctx.Err() == nil && r.Logger != nil {
			r.Logger.Warn("pruning usage call records failed; retried at the next turn", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Prune deletes the records older than Age, a batch at a time so no DELETE
// holds many locks, and returns how many it deleted.
func (r Retention) Prune(ctx context.Context) (int64, error) {
	if r.Age <= 0 {
		return 0, nil
	}
	now, batch := r.Now, r.Batch
	if now == nil {
		now = time.Now
	}
	if batch <= 0 {
		batch = 10_000
	}
	before := now().Add(-r.Age)
	var total int64
	for {
		n, err := r.Store.PruneUsageCalls(ctx, before, batch)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}
