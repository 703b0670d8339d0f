package llm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// fakeQueue is an EmbedQueue that records its acquires; block makes an
// acquire wait for its context.
type fakeQueue struct {
	mu        sync.Mutex
	acquires  []fakeAcquire
	throttled []EmbedGrant
	block     bool
	budgeted  bool
}

type fakeAcquire struct {
	lane  string
	kind  service.EmbedKind
	retry EmbedGrant
}

type fakeGrant struct{ used []int }

func (g *fakeGrant) ReleaseUsed(tokens int) { g.used = append(g.used, tokens) }

func (q *fakeQueue) Acquire(ctx context.Context, lane string, kind service.EmbedKind, tokens int, retry EmbedGrant) (EmbedGrant, error) {
	q.mu.Lock()
	q.acquires = append(q.acquires, fakeAcquire{lane, kind, retry})
	block := q.block
	q.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &fakeGrant{}, nil
}

func (q *fakeQueue) Throttled(ctx context.Context, g EmbedGrant, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.throttled = append(q.throttled, g)
}

func (q *fakeQueue) Budgeted() bool { return q.budgeted }

// fakePause is an EmbedPause whose Left answers lefts in turn (then 0).
type fakePause struct {
	mu       sync.Mutex
	lefts    []time.Duration
	extended []time.Duration
}

func (p *fakePause) Extend(ctx context.Context, d time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.extended = append(p.extended, d)
	return nil
}

func (p *fakePause) Left(ctx context.Context) (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lefts) == 0 {
		return 0, nil
	}
	d := p.lefts[0]
	p.lefts = p.lefts[1:]
	return d, nil
}

func (p *fakePause) Wait(ctx context.Context) error { return nil }

// TestQueueGateLanes: a question queues in its user's lane, a document
// batch in its knowledge base's and uploader's.
func TestQueueGateLanes(t *testing.T) {
	q := &fakeQueue{}
	g := NewQueueGate(q, &fakePause{}, time.Second, time.Minute, nil)
	ctx := service.WithPrincipal(t.Context(), service.Principal{UserID: 3})
	ctx = service.WithUsageScope(ctx, service.UsageScope{UserID: 7, KnowledgeBaseID: 9})
	for _, kind := range []service.EmbedKind{service.EmbedQuery, service.EmbedDocument} {
		release, err := g.Admit(ctx, kind, 10)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	if len(q.acquires) != 2 || q.acquires[0].lane != "query:3" || q.acquires[1].lane != "documents:9:7" ||
		q.acquires[0].kind != service.EmbedQuery || q.acquires[1].kind != service.EmbedDocument {
		t.Fatalf("acquires %+v, want the query in query:3, the batch in documents:9:7", q.acquires)
	}
}

// TestQueueGateQueryWait: a question that finds no slot within the query
// wait is refused as busy, not as the model being down.
func TestQueueGateQueryWait(t *testing.T) {
	g := NewQueueGate(&fakeQueue{block: true}, &fakePause{}, 20*time.Millisecond, time.Minute, nil)
	_, err := g.Admit(t.Context(), service.EmbedQuery, 10)
	if !errors.Is(err, service.ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
}

// TestQueueGatePauseWhileQueued: a batch granted while a pause began
// gives its grant back unused and queues again at the place it was
// granted at.
func TestQueueGatePauseWhileQueued(t *testing.T) {
	q := &fakeQueue{}
	g := NewQueueGate(q, &fakePause{lefts: []time.Duration{time.Second}}, time.Second, time.Minute, nil)
	release, err := g.Admit(t.Context(), service.EmbedDocument, 10)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if len(q.acquires) != 2 || q.acquires[0].retry != nil || q.acquires[1].retry == nil {
		t.Fatalf("acquires %+v, want a second one retrying the first's grant", q.acquires)
	}
	if first := q.acquires[1].retry.(*fakeGrant); len(first.used) != 1 || first.used[0] != 0 {
		t.Fatalf("the first grant was settled with %v, want [0] (no call went out)", first.used)
	}
}

// TestQueueGateRefusalKeepsPlace: with a budget or without, a refused
// call's grant pauses the batches, goes back to the queue, and the next
// try retries it; only a budget absorbs the refusal (maxWait > 0).
func TestQueueGateRefusalKeepsPlace(t *testing.T) {
	for _, budgeted := range []bool{true, false} {
		q, p := &fakeQueue{budgeted: budgeted}, &fakePause{}
		g := NewQueueGate(q, p, time.Second, time.Minute, nil)
		b, maxWait := g.Budget(service.EmbedDocument)
		if b == nil || (maxWait > 0) != budgeted {
			t.Fatalf("budgeted %v: Budget = %v, %v", budgeted, b, maxWait)
		}
		first, err := b.Admit(t.Context(), 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		first.Throttled(time.Second)
		if len(q.throttled) != 1 || len(p.extended) != 1 || p.extended[0] != time.Second {
			t.Fatalf("budgeted %v: throttled %v, pause %v", budgeted, q.throttled, p.extended)
		}
		if _, err := b.Admit(t.Context(), 10, first); err != nil {
			t.Fatal(err)
		}
		if last := q.acquires[len(q.acquires)-1]; last.retry != q.throttled[0] {
			t.Fatalf("budgeted %v: the retry's acquire retried %v, want the refused grant", budgeted, last.retry)
		}
	}
}
