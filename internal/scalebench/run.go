package scalebench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/service"
)

// BulkStore is the store as a run uses it.
type BulkStore interface {
	Store
	DropVectorIndex(ctx context.Context, dim int) error
	BuildVectorIndex(ctx context.Context, dim, memMB int) error
	Vacuum(ctx context.Context) error
	StorageSizes(ctx context.Context) (int64, map[string]int64, error)
	ActiveWaits(ctx context.Context) ([]string, error)
	// SettleKeywords brings the keyword index to its steady state after a
	// load (compaction of what was written since).
	SettleKeywords(ctx context.Context) error
}

// Env is a running instance as a run drives it.
type Env struct {
	Store    BulkStore
	IDs      service.IDGenerator
	Embedder service.Embedder
	Searcher Searcher
	Ingester eval.Ingester
	KB       service.ID // an empty knowledge base embedded by Embedder
	// Baseline is a second empty knowledge base like KB, for the
	// smallest size's corpus in Options.GrowthPasses's comparison
	// (needed only then).
	Baseline service.ID
	Space    string     // the key of KB's embedding space (service.EmbeddingSpace)
	HTTP     SearchFunc // POST /api/v1/search on the same instance
	// Refresh, when set, makes every indexed chunk searchable at once
	// (OpenSearch's refresh: a ready document's chunks are indexed and
	// searchable only at the index's next refresh).
	Refresh func(context.Context) error
}

// settle makes what WaitSearchable waited for searchable now.
func (env Env) settle(ctx context.Context) error {
	if env.Refresh == nil {
		return nil
	}
	return env.Refresh(ctx)
}

// Options are the knobs of one run.
type Options struct {
	Sizes      []int // chunks bulk-loaded before each measurement, ascending
	Queries    int   // queries timed per size
	Ingest     int   // documents ingested through the pipeline after each size; 0: none
	Uploaders  int
	IndexMemMB int    // maintenance_work_mem for the HNSW builds
	QueriesDir string // where the queries of each size are written (for the peer engine); "" for none
	// ProfileDir, when set, receives a Go CPU profile of each pipeline run
	// (ingest-SIZE.pprof), and the result lists the database's wait events
	// sampled during it.
	ProfileDir string
	// GrowthPasses, when above 0 and with two sizes or more, times keyword
	// search at the largest size against the smallest in one window after
	// the last size (Growth), over this many passes of each size's queries.
	GrowthPasses int
	Log          io.Writer
}

// Result is one size's measurements; the script turns them into a table.
type Result struct {
	Size           int     `json:"size"`   // bulk-loaded chunks
	Chunks         int     `json:"chunks"` // all chunks when searched (bulk + pipeline so far)
	LoadSeconds    float64 `json:"load_seconds"`
	LoadChunksPerS float64 `json:"load_chunks_per_s"`
	HNSWSeconds    float64 `json:"hnsw_seconds"`
	SettleSeconds  float64 `json:"settle_seconds"` // keyword index compaction after the load
	// SyncSeconds is the time from the end of the load until every loaded
	// document is ready: with RAGENT_SEARCH_BACKEND=opensearch the
	// search-index consumer's mirror of the chunks into OpenSearch (then
	// searchable within the index's refresh interval); about 0 with the
	// Postgres backend, where ReplaceChunks makes them ready in its own
	// transaction.
	SyncSeconds  float64 `json:"sync_seconds"`
	Postings     int64   `json:"postings"`
	DBBytes      int64   `json:"db_bytes"`      // growth of the database since the empty knowledge base
	KeywordBytes int64   `json:"keyword_bytes"` // growth of every table but chunks, documents and blobs
	ChunksBytes  int64   `json:"chunks_bytes"`
	// KeywordTables is KeywordBytes by table: a bulk load can leave a
	// table's high-water mark behind (an emptied write buffer keeps its
	// pages until VACUUM FULL), which this shows apart.
	KeywordTables  map[string]int64                `json:"keyword_tables"` // the chunks table with its indexes (HNSW included)
	BytesPerChunk  float64                         `json:"db_bytes_per_chunk"`
	BytesPerPost   float64                         `json:"keyword_bytes_per_posting"`
	Queries        int                             `json:"queries"`
	Latency        map[string]map[string]LatencyMS `json:"latency"` // mode → path → latency
	IngestDocs     int                             `json:"ingest_docs"`
	IngestChunks   int                             `json:"ingest_chunks"`
	IngestSeconds  float64                         `json:"ingest_seconds"`
	IngestChunksPS float64                         `json:"ingest_chunks_per_s"`
	// IngestWaits are the most frequent database wait events (with their
	// statements) sampled during the pipeline run, with ProfileDir.
	IngestWaits []string `json:"ingest_waits,omitempty"`
	// Growth is on the largest size's result, with Options.GrowthPasses.
	Growth *Growth `json:"growth,omitempty"`
}

// LatencyMS is a Latency in milliseconds, for JSON.
type LatencyMS struct {
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Hit10 float64 `json:"hit10"`
}

// notKeyword are the tables whose size is not the keyword index's.
var notKeyword = map[string]bool{"chunks": true, "documents": true, "document_blobs": true, "outbox": true}

// Run loads each size in turn (adding to what the previous size loaded),
// measures it and writes one JSON line per size to out.
func Run(ctx context.Context, env Env, gen *Generator, opt Options, out io.Writer) error {
	startDB, startTables, err := env.Store.StorageSizes(ctx)
	if err != nil {
		return err
	}
	b := &bench{env: env, gen: gen, opt: opt, dim: env.Embedder.Dim(), startDB: startDB, startTables: startTables,
		loader: &Loader{Store: env.Store, IDs: env.IDs, Embedder: env.Embedder, Gen: gen, KB: env.KB, Space: env.Space},
		// Pipeline documents come after every corpus document, so they
		// never collide with a query's source.
		nextFresh: opt.Sizes[len(opt.Sizes)-1],
	}
	for i, size := range opt.Sizes {
		r := Result{Size: size, Queries: opt.Queries}
		for _, step := range []func(context.Context, *Result) error{b.load, b.timeQueries, b.measureStorage, b.ingest} {
			if err := step(ctx, &r); err != nil {
				return err
			}
		}
		if i == len(opt.Sizes)-1 && i > 0 && opt.GrowthPasses > 0 {
			if r.Growth, err = timeGrowth(ctx, env, gen, opt); err != nil {
				return err
			}
		}
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
			return err
		}
	}
	return nil
}

// bench is the state of a Run from one size to the next.
type bench struct {
	env    Env
	gen    *Generator
	opt    Options
	dim    int
	loader *Loader
	// The database's sizes before the first load.
	startDB     int64
	startTables map[string]int64
	// loaded counts the bulk-loaded chunks so far, postings their keyword
	// postings, ingested the pipeline's documents; nextFresh numbers the
	// pipeline's next document.
	loaded, ingested, nextFresh int
	postings                    int64
}

// load bulk-loads the chunks up to r.Size, waits until they are
// searchable, then builds the HNSW index, settles the keyword index and
// vacuums.
func (b *bench) load(ctx context.Context, r *Result) error {
	env, size := b.env, r.Size
	fmt.Fprintf(b.opt.Log, "scalebench: loading chunks %d..%d\n", b.loaded, size)
	if err := env.Store.DropVectorIndex(ctx, b.dim); err != nil {
		return err
	}
	st, err := b.loader.Load(ctx, b.loaded, size)
	if err != nil {
		return err
	}
	b.loaded, b.postings = size, b.postings+st.Postings
	r.LoadSeconds, r.LoadChunksPerS = st.Elapsed.Seconds(), float64(st.Chunks)/st.Elapsed.Seconds()
	fmt.Fprintf(b.opt.Log, "scalebench: loaded %d chunks in %.0fs; waiting until they are searchable\n", st.Chunks, r.LoadSeconds)
	t := time.Now()
	if err := WaitSearchable(ctx, env.Ingester, env.KB); err != nil {
		return err
	}
	if err := env.settle(ctx); err != nil {
		return err
	}
	r.SyncSeconds = time.Since(t).Seconds()
	fmt.Fprintf(b.opt.Log, "scalebench: searchable after %.0fs more; building the HNSW index\n", r.SyncSeconds)
	t = time.Now()
	if err := env.Store.BuildVectorIndex(ctx, b.dim, b.opt.IndexMemMB); err != nil {
		return err
	}
	r.HNSWSeconds = time.Since(t).Seconds()
	t = time.Now()
	if err := env.Store.SettleKeywords(ctx); err != nil {
		return err
	}
	r.SettleSeconds = time.Since(t).Seconds()
	if err := env.Store.Vacuum(ctx); err != nil {
		return err
	}
	r.Chunks = b.loaded + b.ingested
	return nil
}

// timeQueries times the size's queries in every mode, in process and over
// HTTP (and writes them to QueriesDir for the peer engine).
func (b *bench) timeQueries(ctx context.Context, r *Result) error {
	queries := b.gen.Queries(b.opt.Queries, r.Size)
	if b.opt.QueriesDir != "" {
		if err := writeQueries(filepath.Join(b.opt.QueriesDir, "queries-"+strconv.Itoa(r.Size)+".jsonl"), queries); err != nil {
			return err
		}
	}
	fmt.Fprintf(b.opt.Log, "scalebench: HNSW built in %.0fs; timing %d queries\n", r.HNSWSeconds, len(queries))
	modes := []service.SearchMode{service.SearchKeyword, service.SearchVector, service.SearchHybrid}
	timing, err := Time(ctx, queries, modes, map[string]SearchFunc{
		"store": InProcess(b.env.Searcher, service.SystemPrincipal(), b.env.KB),
		"http":  b.env.HTTP,
	})
	if err != nil {
		return err
	}
	r.Latency = map[string]map[string]LatencyMS{}
	for mode, paths := range timing {
		r.Latency[string(mode)] = map[string]LatencyMS{}
		for path, l := range paths {
			r.Latency[string(mode)][path] = l.inMS()
		}
	}
	return nil
}

// measureStorage records the storage before the pipeline adds its
// documents: what the bulk-loaded corpus costs.
func (b *bench) measureStorage(ctx context.Context, r *Result) error {
	db, tables, err := b.env.Store.StorageSizes(ctx)
	if err != nil {
		return err
	}
	r.DBBytes = db - b.startDB
	for name, n := range tables {
		if !notKeyword[name] && n != b.startTables[name] {
			if r.KeywordTables == nil {
				r.KeywordTables = map[string]int64{}
			}
			r.KeywordTables[name] = n - b.startTables[name]
			r.KeywordBytes += n - b.startTables[name]
		}
	}
	r.ChunksBytes = tables["chunks"] - b.startTables["chunks"]
	r.Postings = b.postings
	r.BytesPerChunk = float64(r.DBBytes) / float64(r.Chunks)
	r.BytesPerPost = float64(r.KeywordBytes) / float64(max(1, b.postings))
	return nil
}

// ingest runs Options.Ingest documents through the pipeline, if any.
func (b *bench) ingest(ctx context.Context, r *Result) error {
	if b.opt.Ingest <= 0 {
		return nil
	}
	fmt.Fprintf(b.opt.Log, "scalebench: ingesting %d documents through the pipeline\n", b.opt.Ingest)
	var is IngestStats
	err := profile(ctx, b.env.Store, b.opt.ProfileDir, r.Size, &r.IngestWaits, func() (err error) {
		is, err = Ingest(ctx, b.env.Ingester, b.gen, b.env.KB, b.nextFresh, b.opt.Ingest, b.opt.Uploaders)
		return err
	})
	if err != nil {
		return err
	}
	b.nextFresh += b.opt.Ingest
	b.ingested += is.Documents
	r.IngestDocs, r.IngestChunks, r.IngestSeconds, r.IngestChunksPS = is.Documents, is.Chunks, is.Elapsed.Seconds(), is.ChunksPerSecond()
	if is.Failed > 0 {
		return fmt.Errorf("scalebench: %d pipeline documents failed", is.Failed)
	}
	return nil
}

// WaitSearchable waits until no document of kb is pending or running: a
// search backend that indexes after the commit (OpenSearch) leaves the
// documents running until the engine holds their chunks. A failed document
// is an error: the corpus it carries would be missing from the timings.
func WaitSearchable(ctx context.Context, svc eval.Ingester, kb service.ID) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		waiting, failed, err := unsettled(ctx, svc, kb)
		if err != nil {
			return err
		}
		if failed > 0 {
			return fmt.Errorf("scalebench: %d documents failed while waiting for them to be searchable", failed)
		}
		if waiting == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// unsettled counts kb's documents that are not ready yet, and the failed.
func unsettled(ctx context.Context, svc eval.Ingester, kb service.ID) (waiting, failed int, err error) {
	var before service.ID
	for {
		page, err := svc.Documents(ctx, service.SystemPrincipal(), kb, before, 1000)
		if err != nil {
			return 0, 0, err
		}
		for _, d := range page {
			switch d.Status {
			case service.DocumentPending, service.DocumentRunning:
				waiting++
			case service.DocumentFailed:
				failed++
			}
		}
		if len(page) < 1000 {
			return waiting, failed, nil
		}
		before = page[len(page)-1].ID
	}
}

func writeQueries(path string, queries []BenchQuery) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetEscapeHTML(false)
	for _, q := range queries {
		if err := enc.Encode(struct {
			ID   string `json:"_id"`
			Text string `json:"text"`
		}{q.ID, q.Text}); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
