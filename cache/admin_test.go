package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// source is an in-memory source of truth that counts its loads and can
// hold them until released.
type source struct {
	mu      sync.Mutex
	terms   []service.TermMapping
	nodes   []*service.IntentNode
	loads   atomic.Int32
	gate    chan struct{} // nil: loads return at once
	entered chan struct{} // receives once per load, when set
	err     error
}

func (s *source) wait(ctx context.Context) error {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *source) TermMappings(ctx context.Context) ([]service.TermMapping, error) {
	s.loads.Add(1)
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]service.TermMapping(nil), s.terms...), s.err
}

func (s *source) IntentTree(ctx context.Context) ([]*service.IntentNode, error) {
	s.loads.Add(1)
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var nodes []*service.IntentNode
	for _, n := range s.nodes {
		c := *n
		nodes = append(nodes, &c)
	}
	return service.BuildIntentTree(nodes), s.err
}

func (s *source) setTerms(ms ...service.TermMapping) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terms = ms
}

func term(src, dst string) service.TermMapping {
	return service.TermMapping{ID: 1, SourceTerm: src, TargetTerm: dst, Enabled: true}
}

func TestTermsMissLoadHitAndTTL(t *testing.T) {
	rdb, prefix := testenv.Redis(t), testenv.Prefix(t)
	ctx := context.Background()
	src := &source{terms: []service.TermMapping{term("那个打日志的", "SLS 日志服务")}}
	m := NewMetrics(prometheus.NewRegistry())
	c := NewTerms(rdb, prefix, src, Config{Metrics: m})

	for i := range 3 {
		got, err := c.TermMappings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].TargetTerm != "SLS 日志服务" {
			t.Fatalf("read %d: %+v", i, got)
		}
	}
	if n := src.loads.Load(); n != 1 {
		t.Fatalf("%d loads for 3 reads, want 1 (hits must not query the source)", n)
	}
	if hits := counter(m.lookups.WithLabelValues("term_mappings", "hit")); hits != 2 {
		t.Fatalf("%v hits, want 2", hits)
	}
	ttl := rdb.PTTL(ctx, prefix+"query-term:mappings").Val()
	if ttl < AdminTTL-time.Minute || ttl > AdminTTL {
		t.Fatalf("TTL %v, want about %v", ttl, AdminTTL)
	}
}

func TestEmptyListIsCached(t *testing.T) {
	rdb, prefix := testenv.Redis(t), testenv.Prefix(t)
	ctx := context.Background()
	src := &source{}
	terms := NewTerms(rdb, prefix, src, Config{})
	intents := NewIntents(rdb, prefix, src, Config{})
	for range 2 {
		ms, err := terms.TermMappings(ctx)
		if err != nil || ms == nil || len(ms) != 0 {
			t.Fatalf("terms: %v, %v; want an empty non-nil list", ms, err)
		}
		tree, err := intents.IntentTree(ctx)
		if err != nil || tree == nil || len(tree) != 0 {
			t.Fatalf("tree: %v, %v; want an empty non-nil list", tree, err)
		}
	}
	if n := src.loads.Load(); n != 2 {
		t.Fatalf("%d loads, want 2 (one per cache)", n)
	}
	for key, want := range map[string]string{prefix + "intent:tree": "[]", prefix + "query-term:mappings": "[]"} {
		if v := rdb.Get(ctx, key).Val(); v != want {
			t.Fatalf("%s = %q, want %q", key, v, want)
		}
	}
}

func TestIntentTreeRoundTripsWithPaths(t *testing.T) {
	rdb, prefix := testenv.Redis(t), testenv.Prefix(t)
	src := &source{nodes: []*service.IntentNode{
		{ID: 1, Code: "it", Name: "IT support", Kind: service.IntentKB, KnowledgeBaseIDs: []service.ID{7}, Enabled: true},
		{ID: 2, ParentID: 1, Code: "it.vpn", Name: "VPN", Kind: service.IntentKB, KnowledgeBaseIDs: []service.ID{7}},
	}}
	c := NewIntents(rdb, prefix, src, Config{})
	for range 2 { // miss, then hit: both decode the same shape
		tree, err := c.IntentTree(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(tree) != 1 || len(tree[0].Children) != 1 || tree[0].Children[0].Path != "IT support > VPN" ||
			tree[0].Children[0].ParentID != 1 || tree[0].Children[0].KnowledgeBaseIDs[0] != 7 || tree[0].Children[0].Enabled {
			t.Fatalf("tree %+v", tree)
		}
		tree[0].Name = "mutated by a caller" // each call has its own copy
	}
}

func TestInvalidateDropsTheCopy(t *testing.T) {
	rdb, prefix := testenv.Redis(t), testenv.Prefix(t)
	ctx := context.Background()
	src := &source{terms: []service.TermMapping{term("a", "b")}}
	c := NewTerms(rdb, prefix, src, Config{})
	if _, err := c.TermMappings(ctx); err != nil {
		t.Fatal(err)
	}
	src.setTerms(term("a", "c"))
	if err := c.Invalidate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, prefix+"query-term:mappings").Val(); n != 0 {
		t.Fatal("key still exists after Invalidate")
	}
	got, err := c.TermMappings(ctx)
	if err != nil || got[0].TargetTerm != "c" {
		t.Fatalf("after invalidate: %+v, %v; want the new mapping", got, err)
	}
}

// countGets counts GETs of key sent by rdb.
type countGets struct {
	key string
	n   atomic.Int32
}

func (h *countGets) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countGets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *countGets) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) == 2 && args[0] == "get" && args[1] == h.key {
			h.n.Add(1)
		}
		return err
	}
}

func TestConcurrentReadersAfterInvalidateLoadOncePerInstance(t *testing.T) {
	prefix := testenv.Prefix(t)
	key := prefix + "query-term:mappings"
	const instances, readers = 3, 20
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type inst struct {
		c    *Terms
		src  *source
		gets *countGets
	}
	var all []inst
	for range instances {
		rdb := testenv.Redis(t) // one client per instance, as separate processes have
		gets := &countGets{key: key}
		rdb.AddHook(gets)
		src := &source{terms: []service.TermMapping{term("x", "y")}, gate: make(chan struct{}), entered: make(chan struct{}, readers)}
		all = append(all, inst{NewTerms(rdb, prefix, src, Config{}), src, gets})
	}
	if err := all[0].c.Invalidate(ctx); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, instances*readers)
	for _, in := range all {
		for range readers {
			wg.Go(func() {
				ms, err := in.c.TermMappings(ctx)
				if err == nil && (len(ms) != 1 || ms[0].TargetTerm != "y") {
					err = fmt.Errorf("got %+v", ms)
				}
				if err != nil {
					errs <- err
				}
			})
		}
	}
	// Hold every instance's load until all its readers have missed, so they
	// all find the load in flight.
	for i, in := range all {
		select {
		case <-in.src.entered:
		case <-ctx.Done():
			t.Fatalf("instance %d never loaded", i)
		}
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("instance %d's %d readers to reach Redis", i, readers),
			func() bool { return in.gets.n.Load() >= readers })
	}
	time.Sleep(50 * time.Millisecond) // let the last readers join the flight
	for _, in := range all {
		close(in.src.gate)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, in := range all {
		if n := in.src.loads.Load(); n != 1 {
			t.Errorf("instance %d loaded %d times for %d concurrent readers, want 1", i, n, readers)
		}
	}
}

func TestRebuildRacedByWriteIsDropped(t *testing.T) {
	rdb, prefix := testenv.Redis(t), testenv.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src := &source{terms: []service.TermMapping{term("a", "old")}, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	c := NewTerms(rdb, prefix, src, Config{})

	done := make(chan []service.TermMapping, 1)
	go func() {
		ms, _ := c.TermMappings(ctx)
		done <- ms
	}()
	<-src.entered // the rebuild has read the old data...
	// ...when a write commits and invalidates (on another instance).
	other := NewTerms(testenv.Redis(t), prefix, &source{}, Config{})
	if err := other.Invalidate(ctx); err != nil {
		t.Fatal(err)
	}
	close(src.gate)
	if ms := <-done; len(ms) != 1 || ms[0].TargetTerm != "old" {
		t.Fatalf("reader got %+v", ms)
	}
	if n := rdb.Exists(ctx, prefix+"query-term:mappings").Val(); n != 0 {
		t.Fatal("a copy loaded before the write survived the write's invalidation")
	}
}

func TestRedisDownServesFromSource(t *testing.T) {
	proxy, url := testenv.RedisProxyURL(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	opt.DialTimeout = 500 * time.Millisecond
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	prefix := testenv.Prefix(t)
	ctx := context.Background()
	src := &source{terms: []service.TermMapping{term("a", "b")}, nodes: []*service.IntentNode{{ID: 1, Name: "root", Code: "r"}}}
	m := NewMetrics(prometheus.NewRegistry())
	terms := NewTerms(rdb, prefix, src, Config{Metrics: m})
	intents := NewIntents(rdb, prefix, src, Config{Metrics: m})

	if _, err := terms.TermMappings(ctx); err != nil { // cached while Redis is up
		t.Fatal(err)
	}
	proxy.Down()
	for range 2 {
		ms, err := terms.TermMappings(ctx)
		if err != nil || len(ms) != 1 {
			t.Fatalf("terms with redis down: %v, %v", ms, err)
		}
		tree, err := intents.IntentTree(ctx)
		if err != nil || len(tree) != 1 || tree[0].Path != "root" {
			t.Fatalf("tree with redis down: %v, %v", tree, err)
		}
	}
	if n := counter(m.fallbacks.WithLabelValues("term_mappings")); n != 2 {
		t.Fatalf("term fallbacks counted %v, want 2", n)
	}
	if n := counter(m.fallbacks.WithLabelValues("intent_tree")); n != 2 {
		t.Fatalf("intent fallbacks counted %v, want 2", n)
	}
	if err := terms.Invalidate(ctx); err == nil {
		t.Fatal("Invalidate with redis down reported success")
	}
	if n := counter(m.invalidateEr.WithLabelValues("term_mappings")); n != 1 {
		t.Fatalf("invalidation errors counted %v, want 1", n)
	}

	t.Run("load errors are returned", func(t *testing.T) {
		src.err = errors.New("postgres down")
		if _, err := terms.TermMappings(ctx); err == nil {
			t.Fatal("want the source's error")
		}
	})
}

func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
