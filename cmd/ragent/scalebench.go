package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/ragent-go/ragent/internal/scalebench"
	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
)

// scalebenchCommand runs `ragent scalebench gen|run`: the wiring of
// internal/scalebench to a running App. scripts/scalebench.sh drives it.
func scalebenchCommand(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "gen" && args[0] != "run") {
		return errors.New("scalebench: gen or run")
	}
	fs := flag.NewFlagSet("scalebench "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var spec scalebench.Spec
	fs.StringVar(&spec.Lang, "lang", "en", "en (English-like) or zh (Chinese-like)")
	fs.Uint64Var(&spec.Seed, "seed", 1, "generator seed")
	fs.IntVar(&spec.Docs, "docs", 10000, "gen: corpus documents")
	fs.IntVar(&spec.Queries, "queries", 200, "gen: queries; run: queries timed per size")
	out := fs.String("out", "", "gen: the BEIR folder to write")
	sizes := fs.String("sizes", "10000,50000,200000", "run: chunks to bulk-load before each measurement")
	ingestN := fs.Int("ingest", 1000, "run: documents ingested through the pipeline after each size (0: none)")
	uploaders := fs.Int("uploaders", 4, "run: concurrent uploads")
	indexMem := fs.Int("index-mem-mb", 1024, "run: maintenance_work_mem for the HNSW builds")
	queriesDir := fs.String("queries-dir", "", "run: write each size's queries here (queries-SIZE.jsonl)")
	profileDir := fs.String("profile-dir", "", "run: CPU profile and database wait events of each pipeline run")
	growth := fs.Int("growth-passes", 0, "run: time keyword search at the largest size against the smallest side by side, this many passes (0: not)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if args[0] == "gen" {
		if *out == "" {
			return errors.New("scalebench gen: --out is required")
		}
		g, err := scalebench.NewGenerator(spec)
		if err != nil {
			return err
		}
		return g.Write(*out)
	}

	opt := scalebench.Options{Queries: spec.Queries, Ingest: *ingestN, Uploaders: *uploaders, IndexMemMB: *indexMem,
		QueriesDir: *queriesDir, ProfileDir: *profileDir, GrowthPasses: *growth, Log: stderr}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || (len(opt.Sizes) > 0 && n <= opt.Sizes[len(opt.Sizes)-1]) {
			return fmt.Errorf("scalebench run: --sizes %q: positive and ascending", *sizes)
		}
		opt.Sizes = append(opt.Sizes, n)
	}
	spec.Docs = opt.Sizes[len(opt.Sizes)-1]
	gen, err := scalebench.NewGenerator(spec)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	a, stop, err := startAll(ctx, cfg, log, ln)
	if err != nil {
		ln.Close()
		return err
	}
	defer stop()
	base := "http://" + ln.Addr().String()
	password := cfg.AdminPassword
	if a.AdminPassword != "" {
		password = a.AdminPassword
	}
	token, err := login(ctx, base, cfg.AdminUsername, password)
	if err != nil {
		return err
	}
	embedder, err := llm.NewEmbedder(llmConfig(cfg, log))
	if err != nil {
		return err
	}
	name, size := "scalebench-"+spec.Lang, 2048 // one chunk per document
	kb, err := a.kbs.Create(ctx, service.SystemPrincipal(), admin.KnowledgeBaseInput{Name: &name, ChunkSize: &size})
	if err != nil {
		return fmt.Errorf("scalebench: create knowledge base: %w", err)
	}
	env := scalebench.Env{Store: a.store, IDs: idSource{a.ids}, Embedder: embedder, Searcher: a.searcher, Ingester: a.ingestSvc,
		KB: kb.ID, Space: kb.Space().Key(), HTTP: scalebench.OverHTTP(&http.Client{}, base, token, kb.ID),
		Refresh: func(ctx context.Context) error { return refreshSearch(ctx, cfg) }}
	if opt.GrowthPasses > 0 {
		name += "-baseline"
		baseline, err := a.kbs.Create(ctx, service.SystemPrincipal(), admin.KnowledgeBaseInput{Name: &name, ChunkSize: &size})
		if err != nil {
			return fmt.Errorf("scalebench: create knowledge base: %w", err)
		}
		env.Baseline = baseline.ID
	}
	return scalebench.Run(ctx, env, gen, opt, stdout)
}

// login returns a session token for the admin.
func login(ctx context.Context, base, username, password string) (string, error) {
	body, _ := json.Marshal(map[string]string{"username": username, "password": password})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/auth/login", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var s struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != http.StatusOK || s.Token == "" {
		return "", fmt.Errorf("scalebench: admin login: status %d (set RAGENT_ADMIN_PASSWORD): %v", resp.StatusCode, err)
	}
	return s.Token, nil
}
