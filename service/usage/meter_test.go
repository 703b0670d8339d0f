package usage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// memorySink stores records by call id, as the real store does, and can be
// made to fail.
type memorySink struct {
	mu      sync.Mutex
	byID    map[string]service.UsageRecord
	order   []string
	fail    error
	batches []int
}

func newMemorySink() *memorySink { return &memorySink{byID: map[string]service.UsageRecord{}} }

func (s *memorySink) SaveUsage(_ context.Context, recs []service.UsageRecord) ([]service.UsageRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	s.batches = append(s.batches, len(recs))
	var saved []service.UsageRecord
	for _, r := range recs {
		if _, ok := s.byID[r.CallID]; ok {
			continue
		}
		s.byID[r.CallID] = r
		s.order = append(s.order, r.CallID)
		saved = append(saved, r)
	}
	return saved, nil
}

func counter() func() string {
	n := 0
	return func() string { n++; return fmt.Sprint("gen-", n) }
}

func TestMeterBatchesAndNamesCalls(t *testing.T) {
	sink := newMemorySink()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var recorded []service.UsageRecord
	m := NewMeter(sink, counter(), MeterConfig{BatchSize: 2, Now: func() time.Time { return at },
		Recorded: func(r service.UsageRecord) { recorded = append(recorded, r) }})
	m.Record(service.UsageRecord{CallID: "a", Kind: service.UsageAnswer, PromptTokens: 10})
	m.Record(service.UsageRecord{Kind: service.UsageEmbedding, PromptTokens: 5})
	m.Record(service.UsageRecord{CallID: "c", Kind: service.UsageTitle, At: at.Add(-time.Hour)})
	if n := m.Buffered(); n != 3 {
		t.Fatalf("buffered %d, want 3", n)
	}
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sink.batches) != "[2 1]" {
		t.Errorf("batches %v, want [2 1]", sink.batches)
	}
	if r := sink.byID["gen-1"]; r.PromptTokens != 5 || !r.At.Equal(at) {
		t.Errorf("a record without id or time got %+v", r)
	}
	if r := sink.byID["c"]; !r.At.Equal(at.Add(-time.Hour)) {
		t.Errorf("a record's own time was replaced: %v", r.At)
	}
	if len(recorded) != 3 || m.Buffered() != 0 {
		t.Errorf("recorded %d, buffered %d", len(recorded), m.Buffered())
	}
}

// TestMeterKeepsRecordsThroughAFailure: a failed flush puts the batch back
// ahead of newer records; a record flushed twice (a replay after the
// store took it but the answer was lost) is counted once.
func TestMeterKeepsRecordsThroughAFailure(t *testing.T) {
	sink := newMemorySink()
	var recorded int
	m := NewMeter(sink, counter(), MeterConfig{BatchSize: 10, Recorded: func(service.UsageRecord) { recorded++ }})
	m.Record(service.UsageRecord{CallID: "first"})
	sink.fail = errors.New("postgres down")
	if err := m.Flush(t.Context()); err == nil {
		t.Fatal("flush succeeded against a failing store")
	}
	m.Record(service.UsageRecord{CallID: "second"})
	m.Record(service.UsageRecord{CallID: "first"}) // the same call, retried
	sink.fail = nil
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sink.order) != "[first second]" {
		t.Errorf("stored %v, want [first second]", sink.order)
	}
	if recorded != 2 {
		t.Errorf("recorded %d, want 2 (a retried call counts once)", recorded)
	}
}

// TestMeterDropsOldestWhenFull: an outage long enough to fill the buffer
// drops the oldest records, and says how many.
func TestMeterDropsOldestWhenFull(t *testing.T) {
	sink := newMemorySink()
	dropped := 0
	m := NewMeter(sink, counter(), MeterConfig{MaxBuffered: 3, BatchSize: 100, Dropped: func(n int) { dropped += n }})
	for i := range 5 {
		m.Record(service.UsageRecord{CallID: fmt.Sprint("r", i)})
	}
	if dropped != 2 || m.Buffered() != 3 {
		t.Fatalf("dropped %d, buffered %d; want 2 and 3", dropped, m.Buffered())
	}
	if err := m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sink.order) != "[r2 r3 r4]" {
		t.Errorf("stored %v, want the newest three", sink.order)
	}
}

// TestMeterRunFlushesAFullBatch: Run writes a full batch without waiting
// for its interval.
func TestMeterRunFlushesAFullBatch(t *testing.T) {
	sink := newMemorySink()
	// Buffered: the flush may report before the test waits for it.
	done := make(chan struct{}, 2)
	m := NewMeter(sink, counter(), MeterConfig{BatchSize: 2, FlushInterval: time.Hour,
		Recorded: func(service.UsageRecord) {
			select {
			case done <- struct{}{}:
			default:
			}
		}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go m.Run(ctx)
	m.Record(service.UsageRecord{CallID: "x"})
	m.Record(service.UsageRecord{CallID: "y"})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a full batch was not flushed before the hourly interval")
	}
}

type fakePruner struct {
	rows   []time.Time
	calls  int
	before time.Time
	err    error
}

func (p *fakePruner) PruneUsageCalls(_ context.Context, before time.Time, limit int) (int64, error) {
	p.calls++
	p.before = before
	if p.err != nil {
		return 0, p.err
	}
	var n int64
	kept := p.rows[:0]
	for _, at := range p.rows {
		if at.Before(before) && n < int64(limit) {
			n++
			continue
		}
		kept = append(kept, at)
	}
	p.rows = kept
	return n, nil
}

func TestRetentionPrunesInBatches(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := &fakePruner{}
	for i := range 25 {
		p.rows = append(p.rows, now.Add(-time.Duration(i)*24*time.Hour))
	}
	r := Retention{Store: p, Age: 10 * 24 * time.Hour, Batch: 4, Now: func() time.Time { return now }}
	n, err := r.Prune(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Rows 11..24 days old go (14); 0..10 days stay (11; day 10 is not
	// before the cutoff).
	if n != 14 || len(p.rows) != 11 {
		t.Fatalf("pruned %d, kept %d; want 14 and 11", n, len(p.rows))
	}
	if p.calls != 4 { // 4 + 4 + 4 + 2
		t.Errorf("%d DELETEs, want 4 batches", p.calls)
	}
	if !p.before.Equal(now.Add(-10 * 24 * time.Hour)) {
		t.Errorf("cutoff %v", p.before)
	}
	if n, _ := (Retention{Store: p}).Prune(t.Context()); n != 0 || p.calls != 4 {
		t.Error("a zero Age pruned")
	}
	p.err = errors.New("down")
	if _, err := r.Prune(t.Context()); err == nil {
		t.Error("a failing store's error was lost")
	}
}
