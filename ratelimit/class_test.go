package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
)

// TestClassesOrderAndReserve: a request of a lower class level goes ahead of
// every queued request of a higher one, whatever their order of arrival,
// and a class with a reserve leaves that many permits to lower classes.
func TestClassesOrderAndReserve(t *testing.T) {
	t.Parallel()
	l, rdb := cleanLimiter(t, "embed", Config{MaxConcurrent: 2, MaxWait: 20 * time.Second, Lease: 5 * time.Second,
		PollInterval: 20 * time.Millisecond})
	ctx := t.Context()
	low := Class{Level: 512, Reserve: 1}

	// The reserve: one document batch holds the one permit its class may
	// use, the next one waits although a permit is free.
	doc, err := l.AcquireClass(ctx, "doc-0", "documents", low, nil)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		id string
		p  *Permit
	}
	granted := make(chan grant, 10)
	acquire := func(id, user string, c Class) {
		go func() {
			p, err := l.AcquireClass(ctx, id, user, c, nil)
			if err != nil {
				granted <- grant{id: id + ": " + err.Error()}
				return
			}
			t.Cleanup(p.Release)
			granted <- grant{id, p}
		}()
	}
	// One at a time, so that their arrival order is the order asked for.
	for i := 1; i <= 3; i++ {
		acquire(fmt.Sprintf("doc-%d", i), "documents", low)
		testenv.Eventually(t, 10*time.Second, "batch queued", func() bool { return rdb.ZCard(ctx, l.keys.queue).Val() == int64(i) })
	}
	select {
	case g := <-granted:
		t.Fatalf("%s granted beyond its class's share", g.id)
	default:
	}
	// A query arriving last takes the free permit at once.
	q, err := l.AcquireClass(ctx, "query-0", "query:alice", Class{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// With every permit held, a second query queues ahead of the batches
	// that arrived before it, and gets the next permit freed.
	acquire("query-1", "query:bob", Class{})
	testenv.Eventually(t, 10*time.Second, "the query queued", func() bool { return rdb.ZCard(ctx, l.keys.queue).Val() == 4 })
	if rank := rdb.ZRank(ctx, l.keys.queue, "query-1").Val(); rank != 0 {
		t.Fatalf("query queued at rank %d behind document batches", rank)
	}
	q.Release()
	g := <-granted
	if g.id != "query-1" {
		t.Fatalf("%s granted first, want the query", g.id)
	}
	// The documents' share is still one permit, and while a query holds
	// the other one, the batches wait for both to be free.
	doc.Release()
	select {
	case g := <-granted:
		t.Fatalf("%s granted while the query holds the reserved permit", g.id)
	case <-time.After(200 * time.Millisecond):
	}
	g.p.Release()
	if g := <-granted; g.id != "doc-1" {
		t.Fatalf("%s granted, want doc-1 (first come first served within the class)", g.id)
	}
}

// TestPause: a pause is never shortened, Wait returns when it ends, and an
// early delete of its key ends it too.
func TestPause(t *testing.T) {
	t.Parallel()
	rdb, prefix := cleanRedis(t)
	p := NewPause(rdb, prefix, "embed")
	ctx := t.Context()
	if left, err := p.Left(ctx); err != nil || left != 0 {
		t.Fatalf("no pause: %v %v", left, err)
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := p.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if left, _ := p.Left(ctx); left < 50*time.Second {
		t.Fatalf("a shorter pause shortened a longer one: %v left", left)
	}
	waited := make(chan error, 1)
	go func() { waited <- p.Wait(ctx) }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned during the pause: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	rdb.Del(ctx, p.key)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the pause was lifted")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	p.Extend(ctx, time.Minute)
	if err := p.Wait(short); err == nil {
		t.Fatal("Wait ignored its context")
	}
}
