package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/chat"
)

// exportFeedbackCommand runs `ragent eval export-feedback`: the downvoted
// answers whose right chunks an admin marked, as a BEIR folder that
// `ragent eval --dataset` scores (README "Answer feedback").
func exportFeedbackCommand(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval export-feedback", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "folder to write corpus.jsonl, queries.jsonl and qrels/test.tsv into (created; must be empty)")
	kb := fs.String("knowledge-base", "", "only answers that searched this knowledge base (id)")
	since := fs.String("since", "", "only feedback given at or after this time (RFC 3339 or YYYY-MM-DD)")
	until := fs.String("until", "", "only feedback given before this time (RFC 3339 or YYYY-MM-DD)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("eval export-feedback: --out is required")
	}
	var f service.FeedbackFilter
	if *kb != "" {
		id, err := service.ParseID(*kb)
		if err != nil {
			return fmt.Errorf("eval export-feedback: --knowledge-base %q: %w", *kb, err)
		}
		f.KnowledgeBaseID = id
	}
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"since", *since, &f.Since}, {"until", *until, &f.Until}} {
		if t.v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			if at, err = time.Parse(time.DateOnly, t.v); err != nil {
				return fmt.Errorf("eval export-feedback: --%s %q: want an RFC 3339 time or YYYY-MM-DD", t.name, t.v)
			}
		}
		*t.dst = at
	}
	if entries, err := os.ReadDir(*out); err == nil && len(entries) > 0 {
		return fmt.Errorf("eval export-feedback: %s is not empty", *out)
	}
	store, err := openMigrated(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer store.Close()
	set, err := chat.New(chat.Deps{Feedback: store}, chat.Config{Logger: log}).ExportFeedback(ctx, service.SystemPrincipal(), f)
	if err != nil {
		return err
	}
	if err := writeEvalSet(*out, set); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "export-feedback queries=%d corpus=%d qrels=%d dir=%s\n", len(set.Queries), len(set.Corpus), len(set.Qrels), *out)
	return nil
}

// writeEvalSet writes set as a BEIR folder.
func writeEvalSet(dir string, set *service.EvalSet) error {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	err := set.Write(func(path string) (io.Writer, error) {
		p := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		return f, nil
	})
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			return err
		}
	}
	files = nil
	return nil
}
