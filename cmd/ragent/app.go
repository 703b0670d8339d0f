package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/api"
	"github.com/ragent-go/ragent/api/mcp"
	"github.com/ragent-go/ragent/idgen"
	"github.com/ragent-go/ragent/mq"
	"github.com/ragent-go/ragent/repository"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
	"github.com/ragent-go/ragent/service/ingest"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/service/usage"
)

// App is one running ragent instance. Tests start several in one process,
// each with its own clients, as separate instances would have.
type App struct {
	cfg      Config
	log      *slog.Logger
	store    *repository.Store
	rdb      redis.UniversalClient
	ids      *idgen.Generator
	registry *prometheus.Registry
	router   *api.Router
	// metricsLn serves /metrics apart from the API (RAGENT_METRICS_ADDR);
	// nil: "off".
	metricsLn net.Listener
	mqMetrics *mq.Metrics
	// meter buffers usage records (tests flush it); quotas checks them.
	meter  *usage.Meter
	quotas *usage.Quotas

	// The knowledge use cases, for commands that drive them without HTTP
	// (eval).
	kbs       *admin.KnowledgeBases
	ingestSvc *ingest.Service
	searcher  *retrieve.Searcher

	// mcp serves /mcp; Run ends its sessions when shutdown begins.
	mcp *mcp.Handler

	// AdminPassword is the generated first-admin password, set only on the
	// start that created the admin.
	AdminPassword string

	closers []func(context.Context) error
	runners []func(context.Context) error
}

// signingSecret returns RAGENT_AUTH_SECRET or the secret stored in settings,
// generating and storing one on the first start.
func (a *App) signingSecret(ctx context.Context) ([]byte, error) {
	if a.cfg.AuthSecret != "" {
		return []byte(a.cfg.AuthSecret), nil
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	v, err := a.store.SettingOrCreate(ctx, "auth.signing_secret", hex.EncodeToString(b[:]))
	if err != nil {
		return nil, fmt.Errorf("signing secret: %w", err)
	}
	return []byte(v), nil
}

// Run serves HTTP on ln (when the role includes the API) and runs the
// background workers until ctx is cancelled, then shuts down gracefully.
func (a *App) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	errc := make(chan error, 2+len(a.runners)) // runners, the API and the metrics server
	for _, r := range a.runners {
		wg.Go(func() {
			if err := r(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- err
			}
		})
	}
	// Requests get their own base context, cancelled with ErrShutdown when
	// shutdown begins, so a stream can tell a shutdown from a client that
	// went away (whatever cancelled ctx). It is also carried as
	// service.Shutdown, so answers that run on after their client left
	// (RAGENT_CHAT_DETACHED_TIMEOUT) stop with it too.
	reqCtx, cancelRequests := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelRequests(nil)
	var srv *http.Server
	if ln != nil {
		srv = &http.Server{
			Handler:           a.router,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       120 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return service.WithShutdown(reqCtx, reqCtx) },
			ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		}
		srv.RegisterOnShutdown(a.mcp.Shutdown)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	var metrics *http.Server
	if a.metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{Registry: a.registry}))
		metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
			ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
		a.log.Info("serving metrics", "addr", a.metricsLn.Addr().String())
		go func() {
			if err := metrics.Serve(a.metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	a.log.Info("shutting down", "timeout", a.cfg.ShutdownTimeout.String())
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
	defer scancel()
	if srv != nil {
		// Stop accepting; open streams see their context cancelled (reason
		// shutdown), end their SSE and release their permits before
		// Shutdown returns.
		cancelRequests(service.ErrShutdown)
		if err := srv.Shutdown(sctx); err != nil {
			a.log.Warn("http shutdown", "err", err)
			srv.Close()
		}
	}
	if metrics != nil {
		// Scraped until the API has drained, so the last numbers are seen.
		if err := metrics.Shutdown(sctx); err != nil {
			metrics.Close()
		}
	}
	cancel(service.ErrShutdown)
	wg.Wait()
	return runErr
}

// Close releases every client and lease, in reverse order of creation.
func (a *App) Close(ctx context.Context) {
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](ctx); err != nil && !errors.Is(err, redis.ErrClosed) {
			a.log.Warn("close", "err", err)
		}
	}
	a.closers = nil
}

// idSource adapts the Snowflake generator to service.IDGenerator. Without
// a worker id (its lease ran out while Redis was away) or with a clock that
// stepped back, a write is refused as unavailable, to be retried.
type idSource struct{ g *idgen.Generator }

// idRetryAfter is the Retry-After of such a refusal: a lost lease is
// re-acquired within a second of Redis answering again.
const idRetryAfter = 5 * time.Second

func (s idSource) NextID() (service.ID, error) {
	id, err := s.g.Next()
	if errors.Is(err, idgen.ErrNoWorker) || errors.Is(err, idgen.ErrClockBackwards) {
		refused := &service.Error{Kind: service.ErrUnavailable, Message: "cannot issue ids right now", RetryAfter: idRetryAfter}
		return 0, fmt.Errorf("%w: %w", refused, err)
	}
	return service.ID(id), err
}

func serve(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) error {
	log.Info("starting ragent", append([]any{"version", version}, cfg.logAttrs()...)...)
	if cfg.PprofAddr != "" {
		// Profiling on its own (loopback) listener, never on the API port.
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		go func() {
			srv := &http.Server{Addr: cfg.PprofAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			log.Warn("pprof server stopped", "err", srv.ListenAndServe())
		}()
	}
	a, err := newApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())
	var ln net.Listener
	if cfg.Role != "worker" {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return err
		}
		log.Info("listening", "addr", ln.Addr().String(), "role", cfg.Role)
		if a.AdminPassword != "" {
			// Printed once, on the start that created the admin.
			fmt.Fprintf(stdout, "\nragent: first admin created — username %q, password %q (change it after logging in)\n\n",
				cfg.AdminUsername, a.AdminPassword)
		}
	}
	return a.Run(ctx, ln)
}

func migrate(ctx context.Context, cfg Config, log *slog.Logger) error {
	store, err := openMigrated(ctx, cfg, log)
	if err != nil {
		return err
	}
	store.Close()
	log.Info("migrations applied")
	return nil
}

// openMigrated opens the database for a one-off command (two connections)
// and applies the migrations; the caller closes the store.
func openMigrated(ctx context.Context, cfg Config, log *slog.Logger) (*repository.Store, error) {
	store, err := repository.Open(ctx, cfg.DatabaseURL, repository.Config{Logger: log, MaxOpenConns: 2})
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, err
	}
	return store, nil
}
