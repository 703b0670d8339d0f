// Command ragent is the one binary of ragent: `serve` runs the HTTP API, the
// web UI, the ingestion worker and the background reapers; `migrate` applies
// the schema; `eval` scores retrieval on a BEIR dataset; `version` prints the
// build. This package is the only composition root: it reads the
// configuration once and wires every adapter into the use cases.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/service/ingest/parse"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ragent:", err)
		os.Exit(1)
	}
}

const commandsHelp = `usage: ragent <command> [flags]

commands:
  serve    [--role all|api|worker]   run the server (migrates first)
  migrate                            apply database migrations and exit
  eval     --dataset DIR [--mode all|hybrid|keyword|vector] [--limit-queries N] [--keep]
                                     ingest a BEIR folder through the pipeline, print nDCG@10 and recall@10
  scalebench gen|run [flags]         synthetic corpora and the retrieval-at-scale benchmark (scripts/scalebench.sh)
  reindex-search                     rebuild the OpenSearch index from Postgres into a new index and swap the alias
  healthcheck [--timeout 5s]         exit 0 when this instance's /readyz answers 200 (the container's probe)
  config-reference                   print docs/configuration.md, the settings table as markdown
  version                            print the version
  parse                              (internal) parse one file from stdin for the ingestion worker

Configuration comes from RAGENT_* environment variables; see docs/configuration.md.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, commandsHelp)
		return errors.New("missing command")
	}
	cmd, args := args[0], args[1:]
	if cmd == "version" {
		fmt.Fprintln(stdout, "ragent", version)
		return nil
	}
	if cmd == "config-reference" {
		return writeConfigReference(stdout)
	}
	if cmd == "parse" {
		// The ingestion worker's parser process: it needs no configuration
		// (and gets none: its environment is empty).
		return parse.ServeChild(ctx, os.Stdin, stdout)
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	log := newLogger(stderr, cfg.LogLevel)
	// go-redis logs through a package-level logger; this is the one place
	// that sets it.
	redis.SetLogger(redisLogger{log})

	switch cmd {
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(stderr)
		role := fs.String("role", cfg.Role, "all, api or worker")
		if err := fs.Parse(args); err != nil {
			return err
		}
		cfg.Role = *role
		if err := cfg.validateRole(); err != nil {
			return err
		}
		return serve(ctx, cfg, log, stdout)
	case "migrate":
		return migrate(ctx, cfg, log)
	case "healthcheck":
		return healthcheck(ctx, cfg, args, stdout, stderr)
	case "eval":
		return evalCommand(ctx, cfg, log, args, stdout, stderr)
	case "scalebench":
		return scalebenchCommand(ctx, cfg, log, args, stdout, stderr)
	case "reindex-search":
		return reindexSearchCommand(ctx, cfg, log, stdout)
	default:
		fmt.Fprintln(stderr, commandsHelp)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func (c Config) validateRole() error {
	switch c.Role {
	case "all", "api", "worker":
		return nil
	}
	return fmt.Errorf("--role %q: must be all, api or worker", c.Role)
}

// newLogger returns the JSON logger every component receives. Lines logged
// with a request context carry its request id.
func newLogger(w io.Writer, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	return slog.New(requestIDHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})})
}
