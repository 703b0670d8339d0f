package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ragent-go/ragent/api"
	"github.com/ragent-go/ragent/mq"
	"github.com/ragent-go/ragent/mq/redisstream"
	"github.com/ragent-go/ragent/mq/rocketmq"
	"github.com/ragent-go/ragent/opensearch"
	"github.com/ragent-go/ragent/repository"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest"
	"github.com/ragent-go/ragent/service/ingest/parse"
	"github.com/ragent-go/ragent/service/retrieve"
)

// searchIndexGroup is the consumer group that mirrors chunks to OpenSearch.
const searchIndexGroup = "ragent-search-indexer"

// searchIndexConcurrency is the search-index handlers running at once per
// instance. Ingestion writes its chunks itself (ReplaceIndexedChunks); the
// consumer mirrors deletions, a replacement's removed chunks, a
// re-embedding's switch (every document of a knowledge base at once) and
// copies the reaper re-queues. A handler mostly waits (two Postgres reads,
// a bulk write it shares with the others, a commit), so many of them clear
// such a burst, their writes sharing bulk requests.
const searchIndexConcurrency = 16

// openSearchIngestHandlers is the ingestion handlers per instance on the
// OpenSearch backend, of which ingestWorkConcurrency parse, chunk and
// embed at once: the others wait in the commit's path, where a document's
// chunks go to OpenSearch in a bulk request shared with the documents in
// flight. With the MQ's default of 4 handlers a bulk request carried about
// one document, and each document waited for a whole round trip of its
// own (issue 24, item 14; docs/benchmarks/opensearch-backend.md).
const openSearchIngestHandlers = 12

// ingestHandlers is the ingestion handlers per instance (0: the MQ's
// default).
func ingestHandlers(cfg Config) int {
	if cfg.SearchBackend == "opensearch" {
		return openSearchIngestHandlers
	}
	return 0
}

// ingestHandlerCount is the ingestion handlers per instance the MQ driver
// runs: the relay's bound on a knowledge base's documents in flight
// follows it (ingest.Config.Handlers).
func ingestHandlerCount(cfg Config) int {
	if n := ingestHandlers(cfg); n > 0 {
		return n
	}
	if cfg.MQDriver == "rocketmq" {
		return rocketmq.DefaultConcurrency
	}
	return redisstream.DefaultConcurrency
}

// ingestWorkConcurrency is the documents parsed, chunked and embedded at
// once per instance: the MQ's default handlers, also when there are more
// (0: as many as there are handlers).
func ingestWorkConcurrency(cfg Config) int {
	if cfg.SearchBackend == "opensearch" {
		return max(redisstream.DefaultConcurrency, rocketmq.DefaultConcurrency)
	}
	return 0
}

// openSearchConns is the connections kept open to OpenSearch: one per
// ingestion handler and search-index handler, and 12 for searches.
const openSearchConns = openSearchIngestHandlers + searchIndexConcurrency + 12

// newOpenSearch is the OpenSearch client of the configuration, with ragent's
// BM25 parameters for the indexes it creates.
func newOpenSearch(cfg Config) (*opensearch.Client, error) {
	c, err := opensearch.New(opensearch.Config{URL: cfg.OpenSearchURL, Index: cfg.OpenSearchIndex,
		K1: retrieve.DefaultK1, B: retrieve.DefaultB, Vectors: cfg.OpenSearchVectors, Conns: openSearchConns})
	if err != nil {
		return nil, fmt.Errorf("RAGENT_OPENSEARCH_URL / RAGENT_OPENSEARCH_INDEX: %w", err)
	}
	return c, nil
}

// refreshSearch makes every ready document searchable at once on the
// OpenSearch backend (a ready document's chunks are indexed, searchable at
// the next refresh), for the commands that search right after ingesting.
func refreshSearch(ctx context.Context, cfg Config) error {
	if cfg.SearchBackend != "opensearch" {
		return nil
	}
	osc, err := newOpenSearch(cfg)
	if err != nil {
		return err
	}
	return osc.Refresh(ctx, osc.Alias())
}

// openSearchStore is the retrieval store of RAGENT_SEARCH_BACKEND=opensearch:
// keyword search ranks in OpenSearch, and the hits' rows come from Postgres,
// which drops any chunk it no longer has (a deleted or superseded one whose
// removal from OpenSearch is still on its way). Knowledge bases and vector
// search stay in Postgres, vector search too unless RAGENT_OPENSEARCH_VECTORS.
type openSearchStore struct {
	*repository.Store
	os searchEngine
}

// searchEngine is what openSearchStore asks of OpenSearch
// (*opensearch.Client).
type searchEngine interface {
	KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchHit, error)
	VectorSearch(ctx context.Context, q service.VectorQuery) ([]service.SearchHit, error)
	Vectors() bool
}

// searchAgain bounds the times a search is asked again because a document
// committed a newer generation between the engine's answer and the rows'
// read (see openSearchStore.rows).
const searchAgain = 2

// The engine is asked for twice the results: some of its hits may be
// chunks Postgres no longer has, or does not have yet (a new generation is
// indexed before its commit), which ChunkResults drops.
func (s openSearchStore) KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchResult, error) {
	limit := q.Limit
	q.Limit *= 2
	return s.rows(ctx, limit, func() ([]service.SearchHit, error) { return s.os.KeywordSearch(ctx, q) })
}

// rows are the first limit hits of search that Postgres has, with their
// rows. The engine answers at one moment and Postgres at a later one: a
// replacement that commits in between has taken the old chunks out of
// Postgres, and the engine's answer predates the new ones, so the document
// would be found in neither version. ChunkResults tells (superseded), and
// the search runs again: the engine holds a replacement's chunks,
// searchable, before its commit, so the next answer has them.
func (s openSearchStore) rows(ctx context.Context, limit int, search func() ([]service.SearchHit, error)) ([]service.SearchResult, error) {
	for again := 0; ; again++ {
		hits, err := search()
		if err != nil {
			return nil, err
		}
		out, superseded, err := s.ChunkResults(ctx, hits)
		if err != nil {
			return nil, err
		}
		if !superseded || again == searchAgain {
			return out[:min(len(out), limit)], nil
		}
	}
}

// VectorSearch runs in OpenSearch with RAGENT_OPENSEARCH_VECTORS, in
// pgvector otherwise.
func (s openSearchStore) VectorSearch(ctx context.Context, q service.VectorQuery) ([]service.SearchResult, error) {
	if !s.os.Vectors() {
		return s.Store.VectorSearch(ctx, q)
	}
	limit := q.Limit
	q.Limit *= 2
	return s.rows(ctx, limit, func() ([]service.SearchHit, error) { return s.os.VectorSearch(ctx, q) })
}

// searchIndexHandler mirrors one document to OpenSearch. It needs no
// consume guard: the handler reads the document's state from Postgres and
// is idempotent, and a guard would drop the reaper's re-queued message
// (it has the same key).
func searchIndexHandler(svc *ingest.Service) mq.Handler {
	return func(ctx context.Context, m mq.Message) error {
		err := svc.ProcessSearchIndex(ctx, m.Body)
		if errors.Is(err, ingest.ErrGaveUp) {
			return mq.Permanent(err)
		}
		return err
	}
}

// reindexSearchCommand rebuilds the OpenSearch index from Postgres with no
// downtime: a new physical index takes every change from the moment it
// exists (the next alias), is backfilled with every chunk, swept of the
// chunks deleted while it was backfilled, and replaces the live index in
// one alias swap.
func reindexSearchCommand(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) error {
	store, err := repository.Open(ctx, cfg.DatabaseURL, repository.Config{Logger: log, MaxOpenConns: 4})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	osc, err := newOpenSearch(cfg)
	if err != nil {
		return err
	}
	n, err := ingest.RebuildSearchIndex(ctx, store, osc, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "reindexed %d chunks into %s\n", n, osc.Alias())
	return nil
}

// openSearch connects the OpenSearch backend: the store queues the
// search-index messages, and the index behind the alias is created at start
// (or by a runner once the cluster answers, so a start during an OpenSearch
// outage still serves everything but search), under the startup lock so
// instances starting together create one index.
func (a *App) openSearch(ctx context.Context, ids service.IDGenerator) (*opensearch.Client, error) {
	osc, err := newOpenSearch(a.cfg)
	if err != nil {
		return nil, err
	}
	a.store.UseSearchIndex(ids.NextID, a.cfg.OpenSearchVectors)
	// Nothing searches Postgres's keyword index on this backend: it is
	// marked stale and no longer written (repairKeywordIndex rebuilds it
	// when the backend is switched back).
	if err := a.store.SkipKeywordIndex(ctx); err != nil {
		return nil, fmt.Errorf("stop the Postgres keyword index: %w", err)
	}
	if err := a.store.WithStartupLock(ctx, osc.EnsureIndex); err != nil {
		a.log.Warn("OpenSearch is not ready; search answers 503 until it is", "err", err)
		a.runners = append(a.runners, func(ctx context.Context) error {
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				if err := a.store.WithStartupLock(ctx, osc.EnsureIndex); err == nil {
					a.log.Info("OpenSearch index ready", "alias", osc.Alias())
					return nil
				}
			}
		})
	}
	return osc, nil
}

// repairKeywordIndex rebuilds Postgres's keyword index, on the Postgres
// backend, when an instance on the OpenSearch backend stopped keeping it
// (repository.Store.SkipKeywordIndex): run at start under the startup lock,
// before this instance searches or ingests, so instances starting together
// rebuild it once.
func (a *App) repairKeywordIndex(ctx context.Context) error {
	stale, err := a.store.KeywordIndexStale(ctx)
	if err != nil || !stale {
		return err
	}
	a.log.Info("rebuilding the Postgres keyword index: it was not kept while RAGENT_SEARCH_BACKEND was opensearch")
	start := time.Now()
	n, err := a.store.RebuildKeywordIndex(ctx, chunkTerms)
	if err != nil {
		return fmt.Errorf("rebuild the Postgres keyword index: %w", err)
	}
	a.log.Info("Postgres keyword index rebuilt", "chunks", n, "seconds", time.Since(start).Seconds())
	return nil
}

// chunkTerms is a chunk's keyword terms as ingestion makes them.
func chunkTerms(content, section string) (map[string]int, int) {
	return ingest.IndexTerms(parse.Chunk{Content: content, Section: section})
}

// pingers are /readyz's checks: OpenSearch among them when it is the
// search backend.
func (a *App) pingers(q *queue, osc *opensearch.Client) map[string]api.Pinger {
	p := map[string]api.Pinger{
		"postgres": a.store,
		"redis":    api.PingFunc(func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() }),
		"mq":       q.producer,
	}
	if osc != nil {
		p["opensearch"] = osc
	}
	return p
}
