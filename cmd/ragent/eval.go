package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/internal/scanpage"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
)

// evalOptions are the flags of `ragent eval`.
type evalOptions struct {
	dataset      string
	modes        []service.SearchMode
	limitQueries int
	keep         bool
	chunkSize    int
	chunkOverlap int
	vectorWeight float64 // < 0: the embedding provider's default
	uploaders    int
	reuse        string // id of a kept evaluation knowledge base
	scanDPI      int    // > 0: upload each document as a scanned PDF of its text at this resolution
}

func parseEvalFlags(args []string, stderr io.Writer) (evalOptions, error) {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o evalOptions
	fs.StringVar(&o.dataset, "dataset", "", "BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv")
	mode := fs.String("mode", "all", "all, hybrid, keyword or vector")
	fs.IntVar(&o.limitQueries, "limit-queries", 0, "score only the first N judged queries (0: all)")
	fs.BoolVar(&o.keep, "keep", false, "keep the evaluation knowledge base afterwards")
	// Abstracts and paragraphs are short: one chunk each lets document-level
	// judgements score chunks directly, as the BEIR baselines do.
	fs.IntVar(&o.chunkSize, "chunk-size", 2048, "target tokens per chunk of the evaluation knowledge base")
	fs.IntVar(&o.chunkOverlap, "chunk-overlap", 64, "overlap tokens between chunks")
	fs.Float64Var(&o.vectorWeight, "vector-weight", -1, "hybrid weight of the vector list (default: the embedding provider's)")
	fs.IntVar(&o.uploaders, "uploaders", 4, "concurrent uploads")
	fs.IntVar(&o.scanDPI, "scan", 0, "upload each document as a scanned PDF of its text at this many dpi (no text layer: read by OCR); 0: as text")
	fs.StringVar(&o.reuse, "knowledge-base", "", "score a knowledge base kept by an earlier run (--keep) instead of ingesting again")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.dataset == "" {
		return o, errors.New("eval: --dataset is required")
	}
	switch m := service.SearchMode(*mode); {
	case *mode == "all":
		o.modes = []service.SearchMode{service.SearchHybrid, service.SearchKeyword, service.SearchVector}
	case m.Valid():
		o.modes = []service.SearchMode{m}
	default:
		return o, fmt.Errorf("eval: --mode %q: must be all, hybrid, keyword or vector", *mode)
	}
	if o.uploaders < 1 {
		o.uploaders = 1
	}
	return o, nil
}

// evalCommand runs `ragent eval`: a fresh knowledge base, the corpus ingested
// through the real pipeline (upload → outbox → relay → MQ → consumer), then
// every judged query through the searcher /search uses.
func evalCommand(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	opts, err := parseEvalFlags(args, stderr)
	if err != nil {
		return err
	}
	ds, err := eval.Load(opts.dataset)
	if err != nil {
		return err
	}

	// One instance with every role: its relay, consumer and reaper run while
	// eval drives the use cases directly.
	a, stop, err := startAll(ctx, cfg, log, nil)
	if err != nil {
		return err
	}
	defer stop()

	var (
		kb   *service.KnowledgeBase
		docs map[service.ID]string
	)
	if opts.reuse != "" {
		if kb, docs, err = reuseKnowledgeBase(ctx, a, opts); err != nil {
			return err
		}
	} else {
		name := fmt.Sprintf("eval-%s-%s", filepath.Base(filepath.Clean(opts.dataset)), time.Now().UTC().Format("20060102-150405.000"))
		in := admin.KnowledgeBaseInput{Name: &name, ChunkSize: &opts.chunkSize, ChunkOverlap: &opts.chunkOverlap}
		if opts.vectorWeight >= 0 {
			in.VectorWeight = &opts.vectorWeight
		}
		if kb, err = a.kbs.Create(ctx, service.SystemPrincipal(), in); err != nil {
			return fmt.Errorf("create knowledge base: %w", err)
		}
		if !opts.keep {
			defer func() {
				if err := a.kbs.Delete(context.WithoutCancel(ctx), service.SystemPrincipal(), kb.ID); err != nil {
					fmt.Fprintf(stderr, "eval: delete knowledge base %s: %v\n", kb.Name, err)
				}
			}()
		}
		fmt.Fprintf(stderr, "eval: knowledge base %s (id %s, chunk size %d, vector weight %.2f, mq %s)\n",
			kb.Name, kb.ID, kb.ChunkSize, kb.VectorWeight, cfg.MQDriver)
		var st eval.IngestStats
		file := eval.TextFile
		if opts.scanDPI > 0 {
			file = scannedFile(opts.scanDPI)
		}
		if st, docs, err = eval.IngestFiles(ctx, a.ingestSvc, kb.ID, ds.Corpus, opts.uploaders, stderr, file); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ingest documents=%d failed=%d chunks=%d seconds=%.1f chunks_per_s=%.1f\n",
			st.Ready, st.Failed, st.Chunks, st.Elapsed.Seconds(), float64(st.Chunks)/st.Elapsed.Seconds())
		if err := refreshSearch(ctx, cfg); err != nil {
			return err
		}
	}

	queries := ds.Queries
	if opts.limitQueries > 0 && opts.limitQueries < len(queries) {
		queries = queries[:opts.limitQueries]
	}
	for _, mode := range opts.modes {
		s, err := eval.ScoreMode(ctx, a.searcher, kb.ID, mode, queries, docs)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "mode=%s ndcg@10=%.4f recall@10=%.4f p50_ms=%.1f p99_ms=%.1f queries=%d\n",
			mode, s.NDCG, s.Recall, ms(s.P50), ms(s.P99), len(queries))
	}
	if hwm := eval.PeakRSS(); hwm > 0 {
		fmt.Fprintf(stdout, "peak_rss_mb=%.0f\n", float64(hwm)/(1<<20))
	}
	return nil
}

// reuseKnowledgeBase loads a knowledge base kept by an earlier run, mapping
// its documents back to corpus ids by their names, and applies
// --vector-weight to it.
func reuseKnowledgeBase(ctx context.Context, a *App, opts evalOptions) (*service.KnowledgeBase, map[service.ID]string, error) {
	id, err := service.ParseID(opts.reuse)
	if err != nil {
		return nil, nil, fmt.Errorf("eval: --knowledge-base %q: %w", opts.reuse, err)
	}
	kb, err := a.kbs.Get(ctx, service.SystemPrincipal(), id)
	if err != nil {
		return nil, nil, fmt.Errorf("eval: --knowledge-base %s: %w", opts.reuse, err)
	}
	if opts.vectorWeight >= 0 && opts.vectorWeight != kb.VectorWeight {
		if kb, err = a.kbs.Update(ctx, service.SystemPrincipal(), id, admin.KnowledgeBaseInput{VectorWeight: &opts.vectorWeight}); err != nil {
			return nil, nil, err
		}
	}
	docs := map[service.ID]string{}
	var before service.ID
	for {
		page, err := a.ingestSvc.Documents(ctx, service.SystemPrincipal(), id, before, 1000)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range page {
			docs[d.ID] = strings.TrimSuffix(d.Name, ".txt")
		}
		if len(page) < 1000 {
			return kb, docs, nil
		}
		before = page[len(page)-1].ID
	}
}

// startAll builds an instance with every role and runs it (serving the API
// on ln unless it is nil) until stop is called, for the commands that drive
// the use cases directly.
func startAll(ctx context.Context, cfg Config, log *slog.Logger, ln net.Listener) (a *App, stop func(), err error) {
	cfg.Role = "all"
	// A command's instance serves no metrics: a server on this host may
	// hold RAGENT_METRICS_ADDR.
	cfg.MetricsAddr = ""
	if a, err = newApp(ctx, cfg, log); err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx, ln) }()
	return a, func() {
		cancel()
		<-done
		a.Close(context.Background())
	}, nil
}

// scannedFile lays a corpus document's title and text out on A4 pages at
// dpi and wraps them in a PDF without a text layer, as a scanner would:
// what the OCR'd copies of a dataset are made of (internal/scanpage).
func scannedFile(dpi int) func(eval.Document) (string, []byte, error) {
	return func(e eval.Document) (string, []byte, error) {
		pages, _, err := scanpage.Text(strings.TrimSpace(e.Title+"\n\n"+e.Text), scanpage.Options{DPI: dpi})
		if err != nil {
			return "", nil, err
		}
		imgs := make([]image.Image, len(pages))
		for i, p := range pages {
			imgs[i] = p
		}
		pdf, err := scanpage.PDF(imgs)
		return e.ID + ".pdf", pdf, err
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
