// Package usage records what every model call spends and enforces the
// quotas admins set on users, groups and API keys (docs/usage-and-quotas.md "Usage and
// quotas").
//
// A Meter buffers usage records in the process and flushes them to the
// store in batches: every FlushInterval, when the buffer fills, and on
// Close. The store writes each record once by its call id, so a flush
// that is replayed after a failure, or a call retried under the same id (a
// redelivered ingestion), is counted once. Records the store took for the
// first time are mirrored into the quota counters (Quotas.mirror).
//
// Quotas checks a request before anything is written: one round trip to
// the shared counters, which count requests as they are admitted and
// tokens as their usage is flushed.
package usage

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Sink stores usage records.
type Sink interface {
	// SaveUsage records recs, skipping those whose call id is recorded
	// already, and returns the ones it recorded now.
	SaveUsage(ctx context.Context, recs []service.UsageRecord) ([]service.UsageRecord, error)
}

// MeterConfig tunes a Meter; zero values take the defaults.
type MeterConfig struct {
	FlushInterval time.Duration // default 1s
	BatchSize     int           // a full batch flushes at once; default 500
	// MaxBuffered bounds what a store outage may hold in memory; beyond it
	// the oldest records are dropped (counted in metrics). Default 100,000.
	MaxBuffered int
	Logger      *slog.Logger
	Now         func() time.Time
	// Dropped and Recorded, when set, count records dropped and tokens
	// recorded (by kind).
	Dropped  func(n int)
	Recorded func(rec service.UsageRecord)
}

// Meter buffers usage records and flushes them in batches.
type Meter struct {
	sink   Sink
	mirror *Quotas // told of records stored for the first time; set by NewQuotas
	cfg    MeterConfig

	mu      sync.Mutex
	buf     []service.UsageRecord
	full    chan struct{} // a batch is waiting
	flushMu sync.Mutex    // one flush at a time
	ids     func() string
}

// NewMeter returns a Meter writing to sink; newID names calls that carry no
// id of their own.
func NewMeter(sink Sink, newID func() string, cfg MeterConfig) *Meter {
	cfg.FlushInterval = cmp.Or(max(cfg.FlushInterval, 0), time.Second)
	cfg.BatchSize = cmp.Or(max(cfg.BatchSize, 0), 500)
	cfg.MaxBuffered = cmp.Or(max(cfg.MaxBuffered, 0), 100_000)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Meter{sink: sink, cfg: cfg, full: make(chan struct{}, 1), ids: newID}
}

// Record buffers rec; it never blocks on the store. A record without a
// call id gets a fresh one, without a time the current one.
func (m *Meter) Record(rec service.UsageRecord) {
	if rec.CallID == "" {
		rec.CallID = m.ids()
	}
	if rec.At.IsZero() {
		rec.At = m.cfg.Now()
	}
	m.mu.Lock()
	m.buf = append(m.buf, rec)
	var dropped int
	if over := len(m.buf) - m.cfg.MaxBuffered; over > 0 {
		m.buf, dropped = append(m.buf[:0:0], m.buf[over:]...), over
	}
	n := len(m.buf)
	m.mu.Unlock()
	if dropped > 0 {
		m.cfg.Logger.Error("usage buffer full: dropped the oldest records", "dropped", dropped)
		if m.cfg.Dropped != nil {
			m.cfg.Dropped(dropped)
		}
	}
	if n >= m.cfg.BatchSize {
		select {
		case m.full <- struct{}{}:
		default:
		}
	}
}

// Run flushes every FlushInterval and whenever a batch is full, until ctx
// ends; Close flushes what is left.
func (m *Meter) Run(ctx context.Context) {
	tick := time.NewTicker(m.cfg.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-m.full:
		}
		if err := m.Flush(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn("flushing usage failed; kept for the next flush", "err", err)
		}
	}
}

// Flush writes every buffered record. On failure the records go back to
// the buffer, ahead of newer ones, for the next flush; the store skips
// any it had taken.
func (m *Meter) Flush(ctx context.Context) error {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	for {
		m.mu.Lock()
		batch := m.buf[:min(len(m.buf), m.cfg.BatchSize)]
		m.buf = m.buf[len(batch):]
		m.mu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		saved, err := m.sink.SaveUsage(ctx, batch)
		if err != nil {
			m.mu.Lock()
			m.buf = append(batch[:len(batch):len(batch)], m.buf...)
			m.mu.Unlock()
			return err
		}
		if m.cfg.Recorded != nil {
			for _, r := range saved {
				m.cfg.Recorded(r)
			}
		}
		if m.mirror != nil && len(saved) > 0 {
			m.mirror.mirror(ctx, saved)
		}
	}
}

// Close flushes what is buffered, within ctx.
func (m *Meter) Close(ctx context.Context) error { return m.Flush(ctx) }

// Buffered returns how many records wait for a flush.
func (m *Meter) Buffered() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buf)
}
