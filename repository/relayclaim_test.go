package repository

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// relayPair returns two stores on one fresh, migrated database, each with
// its own connection pool: the relays of two instances.
func relayPair(t *testing.T) (*Store, *Store) {
	t.Helper()
	url := testenv.FreshDatabase(t)
	a := openTest(t, url)
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return a, openTest(t, url)
}

// recorder is a publish that records the keys it was given.
type recorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *recorder) publish(_ context.Context, m service.OutboxMessage) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, m.Key)
	return "", nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// leasedPair gives s's relay a claim lease of lease and seeds a knowledge
// base with two documents: a0 uploaded by 7, then a1 by uploader.
func leasedPair(t *testing.T, s *Store, lease time.Duration, uploader service.ID) (a0, a1 *service.Document) {
	t.Helper()
	s.relayLease = lease
	kb := seedKB(t, s, 4)
	return seedQueued(t, s, kb, 7, "a0", 100), seedQueued(t, s, kb, uploader, "a1", 101)
}

// claimState reads the claim on d's ingest row.
func claimState(t *testing.T, s *Store, d *service.Document) (claimed bool, leftSeconds float64, sent bool) {
	t.Helper()
	var row struct {
		Claimed bool
		Left    float64
		Sent    bool
	}
	if err := s.db.Raw(`SELECT claimed_by IS NOT NULL AS claimed,
			coalesce(extract(epoch FROM claimed_until - now()), 0) AS left, sent_at IS NOT NULL AS sent
		FROM outbox WHERE key = ?`, key(d)).Scan(&row).Error; err != nil {
		t.Fatal(err)
	}
	return row.Claimed, row.Left, row.Sent
}

// TestRelayIngestBlockedPublishHoldsNoLock: one instance's relay blocks in
// its publish (the MQ stalls); meanwhile the other instance's relay
// publishes the rows the first did not claim, within the bound, counting
// the blocked claim as in flight. Before the relay claimed rows it
// published inside the advisory lock's transaction and the second relay
// waited for the lock until its context ended.
func TestRelayIngestBlockedPublishHoldsNoLock(t *testing.T) {
	s1, s2 := relayPair(t)
	kbA, kbB := seedKB(t, s1, 4), seedKB(t, s1, 4)
	a0 := seedQueued(t, s1, kbA, 7, "a0", 100)
	a1 := seedQueued(t, s1, kbA, 7, "a1", 101)
	b0 := seedQueued(t, s1, kbB, 7, "b0", 200)

	entered, unblock := make(chan string, 1), make(chan struct{})
	type result struct {
		sent, failed int
		err          error
	}
	first := make(chan result, 1)
	go func() {
		sent, failed, err := s1.RelayIngest(context.Background(), 1, 1, func(ctx context.Context, m service.OutboxMessage) (string, error) {
			entered <- m.Key
			select {
			case <-unblock:
				return "", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
		first <- result{sent, failed, err}
	}()
	blocked := <-entered

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var second recorder
	_, _, err := s2.RelayIngest(ctx, 1, 100, second.publish)
	close(unblock)
	if err != nil {
		t.Fatalf("the second relay, while the first is blocked in its publish: %v", err)
	}
	// The first took the head of A or of B; the second takes the other's,
	// and not a1: a0 is in flight, or claimed, and A's bound is 1.
	want := key(b0)
	if blocked == key(b0) {
		want = key(a0)
	}
	if got := second.got(); len(got) != 1 || got[0] != want {
		t.Fatalf("while the first relay is blocked publishing %s the second published %v, want [%s]", blocked, got, want)
	}
	if r := <-first; r.err != nil || r.sent != 1 || r.failed != 0 {
		t.Fatalf("the first relay, unblocked: sent %d failed %d err %v", r.sent, r.failed, r.err)
	}
	if got := relayKeys(t, s2, 1); len(got) != 0 {
		t.Fatalf("with both knowledge bases at their bound the relay published %v", got)
	}
	if _, _, sent := claimState(t, s1, a1); sent {
		t.Fatal("a1 sent beyond A's bound")
	}
}

// TestRelayIngestDeadClaimerResentOnce: a relay dies in its publish
// (its goroutine exits, as its process would, marking nothing). Its claim
// keeps the row from the other relay, and counts as in flight, until it
// lapses; then the other relay sends the row once, and the knowledge
// base's next row only after that document finished.
func TestRelayIngestDeadClaimerResentOnce(t *testing.T) {
	s1, s2 := relayPair(t)
	a0, a1 := leasedPair(t, s1, time.Hour, 7)

	died := make(chan string, 1)
	go func() {
		_, _, _ = s1.RelayIngest(context.Background(), 1, 100, func(_ context.Context, m service.OutboxMessage) (string, error) {
			died <- m.Key
			runtime.Goexit()
			return "", nil
		})
		t.Error("RelayIngest returned after its publish exited")
	}()
	if k := <-died; k != key(a0) {
		t.Fatalf("the relay published %s first, want a0's %s", k, key(a0))
	}
	claimed, left, _ := claimState(t, s1, a0)
	if !claimed || left < 50*60 {
		t.Fatalf("a0 after its claimer died: claimed %v for %.0f s more, want claimed for about the hour's lease", claimed, left)
	}
	if got := relayKeys(t, s2, 1); len(got) != 0 {
		t.Fatalf("with a0's claim live the other relay published %v", got)
	}

	// The lease lapses.
	if err := s1.db.Exec("UPDATE outbox SET claimed_until = now() - interval '1 second' WHERE claimed_by IS NOT NULL").Error; err != nil {
		t.Fatal(err)
	}
	if got := relayKeys(t, s2, 1); len(got) != 1 || got[0] != key(a0) {
		t.Fatalf("after the dead relay's claim lapsed the other published %v, want a0 once", got)
	}
	if got := relayKeys(t, s2, 1); len(got) != 0 {
		t.Fatalf("with a0 in flight the relay published %v", got)
	}
	if err := s1.db.Exec("UPDATE documents SET status = 'ready' WHERE id = ?", int64(a0.ID)).Error; err != nil {
		t.Fatal(err)
	}
	if got := relayKeys(t, s2, 1); len(got) != 1 || got[0] != key(a1) {
		t.Fatalf("after a0 finished the relay published %v, want a1", got)
	}
}

// TestRelayIngestFailedPublishReleases: a publish that fails, and one that
// stalls past half the lease (its context ends), release their claims at
// once: the next round sends the rows, each counted as one failed attempt.
func TestRelayIngestFailedPublishReleases(t *testing.T) {
	s, _ := migrated(t)
	a0, a1 := leasedPair(t, s, time.Second, 8)

	stall := func(ctx context.Context, _ service.OutboxMessage) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // far beyond the lease
	defer cancel()
	if sent, failed, err := s.RelayIngest(ctx, 2, 100, stall); err != nil || sent != 0 || failed != 1 {
		t.Fatalf("a stalled publish: sent %d failed %d err %v", sent, failed, err)
	}
	for _, d := range []*service.Document{a0, a1} {
		if claimed, _, _ := claimState(t, s, d); claimed {
			t.Fatalf("%s still claimed after the publish stalled", key(d))
		}
	}
	fail := func(context.Context, service.OutboxMessage) (string, error) { return "", errors.New("mq down") }
	if _, failed, err := s.RelayIngest(t.Context(), 2, 100, fail); err != nil || failed != 1 {
		t.Fatalf("a failed publish: failed %d err %v", failed, err)
	}
	s.relayLease = time.Hour
	if got := relayKeys(t, s, 2); len(got) != 2 {
		t.Fatalf("after the failures the relay published %v, want a0 and a1", got)
	}
	var attempts int
	if err := s.db.Raw("SELECT attempts FROM outbox WHERE key = ?", key(a0)).Scan(&attempts).Error; err != nil || attempts != 2 {
		t.Fatalf("a0's attempts %d (%v), want 2", attempts, err)
	}
}

// TestRelayTwoInstancesRace: the relays of two instances run at once,
// round after round, while workers finish the published documents. No row
// is published twice, and no knowledge base ever has more than the bound
// of documents published and not finished; the free rows go once too.
func TestRelayTwoInstancesRace(t *testing.T) {
	const perKB, kbs, perLane = 3, 3, 6
	s1, s2 := relayPair(t)
	kbOf := map[string]service.ID{}
	docOf := map[string]service.ID{}
	for k := range kbs {
		kb := seedKB(t, s1, 4)
		for i := range 2 * perLane {
			d := seedQueued(t, s1, kb, service.ID(7+i%2), fmt.Sprintf("k%d-%d", k, i), newID())
			kbOf[key(d)], docOf[key(d)] = kb.ID, d.ID
		}
	}
	const free = 40
	for i := range free {
		if err := s1.enqueue(service.OutboxMessage{ID: newID(), Topic: service.SearchIndexTopic, Key: fmt.Sprint("free", i), Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	published := map[string]int{}
	inFlight := map[service.ID]int{}
	var over []string
	done := make(chan string, len(kbOf))
	publish := func(_ context.Context, m service.OutboxMessage) (string, error) {
		runtime.Gosched()
		mu.Lock()
		defer mu.Unlock()
		if published[m.Key]++; published[m.Key] > 1 {
			return "", nil // reported below
		}
		if kb, ok := kbOf[m.Key]; ok {
			if inFlight[kb]++; inFlight[kb] > perKB {
				over = append(over, fmt.Sprintf("%s made %d in flight", m.Key, inFlight[kb]))
			}
			done <- m.Key
		}
		return "", nil
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(published)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	// The worker counts a document out before it finishes it in the
	// database, so the relays never see room the count has not.
	wg.Go(func() {
		for n := 0; n < len(kbOf); n++ {
			var k string
			select {
			case k = <-done:
			case <-ctx.Done():
				return
			}
			mu.Lock()
			inFlight[kbOf[k]]--
			mu.Unlock()
			if err := s1.db.WithContext(ctx).Exec("UPDATE documents SET status = 'ready' WHERE id = ?", int64(docOf[k])).Error; err != nil {
				t.Error(err)
				return
			}
		}
	})
	for _, s := range []*Store{s1, s2, s1, s2} {
		wg.Go(func() {
			for ctx.Err() == nil && count() < len(kbOf)+free {
				_, _, err1 := s.RelayIngest(ctx, perKB, 2, publish)
				_, _, err2 := s.RelayOutbox(ctx, 3, publish)
				if err := errors.Join(err1, err2); err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(published) != len(kbOf)+free {
		t.Fatalf("published %d distinct rows, want %d", len(published), len(kbOf)+free)
	}
	for k, n := range published {
		if n != 1 {
			t.Errorf("%s published %d times", k, n)
		}
	}
	if len(over) > 0 {
		t.Errorf("the bound of %d was passed: %v", perKB, over)
	}
}
