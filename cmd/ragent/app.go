package main

import (
	"cmp"
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
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragent-go/ragent/api"
	"github.com/ragent-go/ragent/api/mcp"
	"github.com/ragent-go/ragent/cache"
	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/idgen"
	"github.com/ragent-go/ragent/internal/demo"
	"github.com/ragent-go/ragent/internal/redisconn"
	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/mq"
	"github.com/ragent-go/ragent/opensearch"
	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/repository"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
	"github.com/ragent-go/ragent/service/auth"
	"github.com/ragent-go/ragent/service/chat"
	"github.com/ragent-go/ragent/service/ingest"
	"github.com/ragent-go/ragent/service/ingest/parse"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/service/usage"
	"github.com/ragent-go/ragent/stream"
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

// newApp connects to every dependency, migrates and bootstraps under the
// startup lock, and wires the use cases. It starts nothing yet: Run does.
func newApp(ctx context.Context, cfg Config, log *slog.Logger) (_ *App, err error) {
	a := &App{cfg: cfg, log: log, registry: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			a.Close(context.Background())
		}
	}()
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Traces: spans of chat turns and documents over OTLP when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set, none otherwise. Flushed last.
	tp, shutdownTracing, err := newTracing(ctx, cfg)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, shutdownTracing)
	tracer := func(pkg string) trace.Tracer { return tp.Tracer("github.com/ragent-go/ragent/" + pkg) }

	// Postgres: the source of truth. Migrations and first-start bootstrap run
	// under one advisory lock, so many instances can start at once.
	a.store, err = repository.Open(ctx, cfg.DatabaseURL, repository.Config{Logger: log})
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func(context.Context) error { return a.store.Close() })

	// Redis: coordination state and caches, one client for every mechanism,
	// on a single node, behind Sentinel or a Cluster.
	if a.rdb, err = redisconn.New(cfg.redisOptions()); err != nil {
		return nil, fmt.Errorf("RAGENT_REDIS_*: %w", err)
	}
	a.closers = append(a.closers, func(context.Context) error { return a.rdb.Close() })
	// Redis must never evict: attempt counters, leases and queues live there.
	if err := checkRedisEviction(ctx, a.rdb, cfg.RedisAllowEviction, log); err != nil {
		return nil, err
	}

	// Snowflake IDs: a fixed worker id needs no Redis at start.
	if cfg.WorkerID >= 0 {
		a.ids = idgen.New(int64(cfg.WorkerID), idgen.Config{Logger: log})
	} else if a.ids, err = idgen.Lease(ctx, a.rdb, cfg.RedisPrefix, idgen.Config{Logger: log, LeaseTTL: cfg.WorkerLeaseTTL, LeaseRenew: cfg.WorkerLeaseRenew}); err != nil {
		return nil, fmt.Errorf("lease a snowflake worker id (or set RAGENT_WORKER_ID): %w", err)
	}
	a.closers = append(a.closers, a.ids.Close)
	ids := idSource{a.ids}
	// Every audited change writes its event in its own transaction (README
	// "Audit log").
	// Refusals coalesce and failed sign-ins expire (README "Audit log").
	audit := service.NewAuditor(a.store, a.store, ids, service.AuditorConfig{
		Logger: log, CoalesceWindow: cfg.AuditCoalesceWindow, LoginRetention: cfg.AuditLoginRetention, Pruner: a.store,
	})
	a.runners = append(a.runners, audit.Run)

	var (
		authSvc *auth.Service
		signing []byte // also seals the webhooks' secrets
	)
	err = a.store.WithStartupLock(ctx, func(ctx context.Context) error {
		secret, err := a.signingSecret(ctx)
		if err != nil {
			return err
		}
		signing = secret
		authSvc, err = auth.New(a.store, loginAttempts{cache.NewAuthState(a.rdb, cfg.RedisPrefix)}, ids, audit, authConfig(cfg, secret, log))
		if err != nil {
			return err
		}
		generated, created, err := authSvc.Bootstrap(ctx, cfg.AdminUsername, cfg.AdminPassword)
		if err != nil {
			return err
		}
		if created {
			a.AdminPassword = generated
			log.Info("created the first admin", "username", cfg.AdminUsername, "password_generated", generated != "")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrate and bootstrap: %w", err)
	}
	a.runners = append(a.runners, authSvc.Run) // forgets revocations of expired tokens

	// Usage: every model call's tokens, buffered and written in batches
	// (and on shutdown: the closer runs before Postgres closes); quotas
	// checked against counters in Redis (README "Budgets, usage and quotas").
	usageMetrics := newUsageMetrics(a.registry)
	meter := usage.NewMeter(a.store, newCallID, usage.MeterConfig{
		FlushInterval: cfg.UsageFlushInterval, Logger: log,
		Dropped: func(n int) { usageMetrics.dropped.Add(float64(n)) }, Recorded: usageMetrics.recorded,
	})
	quotas := usage.NewQuotas(a.store, cache.NewQuotaCounters(a.rdb, cfg.RedisPrefix), meter, audit, usage.QuotasConfig{
		Enabled: cfg.QuotasEnabled, Logger: log,
		Refused: func(s service.QuotaSubject, metric string) {
			usageMetrics.refusals.WithLabelValues(string(s), metric).Inc()
		},
	})
	a.meter, a.quotas = meter, quotas
	a.runners = append(a.runners, func(ctx context.Context) error { meter.Run(ctx); return nil })
	retention := usage.Retention{Store: a.store, Age: cfg.UsageCallRetention, Logger: log}
	a.runners = append(a.runners, func(ctx context.Context) error { retention.Run(ctx); return nil })
	a.closers = append(a.closers, func(ctx context.Context) error { return meter.Close(ctx) })

	// Knowledge: embeddings (every call behind one cluster-wide fair
	// limit), retrieval, ingestion.
	gate, runGate := newEmbedGate(a.rdb, cfg, a.registry, log)
	a.runners = append(a.runners, runGate)
	embedCfg := llmConfig(cfg, log)
	embedCfg.EmbeddingGate, embedCfg.EmbedMetrics = gate, llm.NewEmbedMetrics(a.registry)
	embedder, err := llm.NewEmbedder(embedCfg)
	if err != nil {
		return nil, fmt.Errorf("embedder: %w", err)
	}
	space := llm.Space(embedder)
	embedder = meteredEmbedder{Embedder: embedder, meter: meter}
	var reranker retrieve.Reranker
	if cfg.RerankModel != "" {
		reranker = meteredReranker{llm.NewReranker(cmp.Or(cfg.RerankBaseURL, cfg.LLMBaseURL), cfg.LLMAPIKey, cfg.RerankModel, llmConfig(cfg, log)),
			meter, cfg.RerankModel}
	}
	// One access resolver decides, for every feature, which knowledge bases
	// a caller may read and change.
	access := service.NewAccess(a.store)
	kbs := admin.NewKnowledgeBases(a.store, access, ids, admin.EmbeddingDefaults{
		Space: space, VectorWeight: vectorWeight(cfg),
	}, audit)
	// Keyword search runs in Postgres or, with RAGENT_SEARCH_BACKEND=opensearch,
	// in OpenSearch, which the store then keeps in line through the outbox.
	var searchStore retrieve.Store = a.store
	var osc *opensearch.Client
	if cfg.SearchBackend == "opensearch" {
		if osc, err = a.openSearch(ctx, ids); err != nil {
			return nil, err
		}
		searchStore = openSearchStore{Store: a.store, os: osc}
	}
	searcher := retrieve.New(searchStore, access, queryEmbedders(embedder, space), reranker, retrieve.Config{
		Tracer:         tracer("service/retrieve"),
		MinVectorScore: cfg.SearchMinVectorScore, Fusion: retrieve.Fusion(cfg.SearchFusion), Logger: log,
		MinRerankScore: cfg.RerankMinScore,
	})
	parser, closeParser, err := newParser(cfg, log)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func(context.Context) error { return closeParser() })
	ingestSvc := ingest.New(a.store, access, embedder, ids, audit, ingest.Config{
		Registerer: a.registry, Tracer: tracer("service/ingest"),

		MaxBytes:           cfg.UploadMaxBytes,
		Limits:             parse.Limits{MaxTextBytes: cfg.IngestMaxTextBytes, Timeout: cfg.IngestParseTimeout},
		MaxChunks:          cfg.IngestMaxChunks,
		Parser:             parser,
		OutboxRetention:    cfg.OutboxRetention,
		PendingTimeout:     cfg.IngestPendingTimeout,
		Space:              space,
		Net:                ingest.NetPolicy{Allow: cfg.FetchAllowNetworks},
		FetchTimeout:       cfg.FetchTimeout,
		MinRefresh:         cfg.FetchMinRefresh,
		WebhookMaxAttempts: cfg.WebhookMaxAttempts,
		WebhookBackoff:     cfg.WebhookBackoff,
		Logger:             log,

		FetchConcurrency:         cfg.FetchConcurrency,
		FetchPerKB:               cfg.FetchPerKB,
		WebhookConcurrency:       cfg.WebhookConcurrency,
		WebhookDeliveryRetention: cfg.WebhookDeliveryRetention,
	})
	ingestSvc.EnableWebhooks(a.store, signing)
	indexMetrics := newIndexMetrics(a.registry)
	if osc != nil {
		ingestSvc.EnableSearchIndex(a.store, measuredIndex{osc, indexMetrics})
	}
	a.kbs, a.ingestSvc, a.searcher = kbs, ingestSvc, searcher
	// Knowledge bases recorded in another embedding space move to the
	// configured one in the background; planned once for all instances.
	if err := a.store.WithStartupLock(ctx, ingestSvc.PlanReembed); err != nil {
		return nil, err
	}

	// Admin data: the intent tree and term mappings, read (by admins and the
	// chat pipeline) through 7-day Redis caches that fall back to Postgres.
	cacheCfg := cache.Config{Metrics: cache.NewMetrics(a.registry), Logger: log}
	intentCache := cache.NewIntents(a.rdb, cfg.RedisPrefix, a.store, cacheCfg)
	termCache := cache.NewTerms(a.rdb, cfg.RedisPrefix, a.store, cacheCfg)
	intents := admin.NewIntents(a.store, intentCache, intentCache, ids, audit, admin.Config{Logger: log})
	terms := admin.NewTerms(a.store, termCache, termCache, ids, audit, admin.Config{Logger: log})

	// Idempotent submit: a duplicate of an in-flight request is refused (the
	// lock's 30 s TTL only bounds a crashed holder: the watchdog renews it),
	// and an Idempotency-Key's first response is replayed for 24 h.
	idem := idempotent.Config{Logger: log, Registerer: a.registry}
	submitLocks := idempotent.NewLocks(a.rdb, cfg.RedisPrefix, 30*time.Second, idem)
	responses := idempotent.NewResponses(a.rdb, cfg.RedisPrefix, 5*time.Minute, idempotent.DefaultResponseTTL, idem)

	// The MQ: the outbox relay and the reaper run on every instance; the
	// ingestion consumer on workers.
	topics := []string{service.IngestTopic}
	if osc != nil {
		topics = append(topics, service.SearchIndexTopic)
	}
	a.mqMetrics = mq.NewMetrics(a.registry, topics...)
	a.registry.MustRegister(newDocumentStates(a.store, log))
	q, err := newQueue(ctx, cfg, a.rdb, a)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func(context.Context) error { q.close(); return nil })
	a.runners = append(a.runners,
		func(ctx context.Context) error { return ingestSvc.RunRelay(ctx, a.mqMetrics.Producer(q.producer)) },
		ingestSvc.RunReaper,
		// The keyword compactor: every instance runs it, one works at a
		// time (an advisory lock). A knowledge base's tail is merged once
		// it holds 20k postings, and all of it every 10 s, so queries
		// never score more than a few seconds of ingestion exhaustively.
		func(ctx context.Context) error {
			return a.store.RunKeywordCompactor(ctx, time.Second, 10*time.Second, 20000)
		},
	)
	if cfg.Role != "api" {
		guard := idempotent.NewGuard(a.rdb, cfg.RedisPrefix, consumingTTL, consumedTTL, idem)
		consumer, err := q.consumer(ingestGroup, service.IngestTopic, ingestHandler(ingestSvc, guard), 0)
		if err != nil {
			return nil, err
		}
		backlog := newBacklogCollector()
		backlog.add(service.IngestTopic, ingestGroup, consumer)
		a.runners = append(a.runners, consumer.Run, ingestSvc.RunFetcher, ingestSvc.RunWebhooks)
		if osc != nil {
			consumer, err := q.consumer(searchIndexGroup, service.SearchIndexTopic, searchIndexHandler(ingestSvc), searchIndexConcurrency)
			if err != nil {
				return nil, err
			}
			backlog.add(service.SearchIndexTopic, searchIndexGroup, consumer)
			a.runners = append(a.runners, consumer.Run)
		}
		a.registry.MustRegister(backlog)
	}

	// Chat: the models (the primary endpoint and its fallbacks, with
	// cooldowns shared through Redis), the fair queue in front of them, the
	// cross-instance stop.
	modelCfg := llmConfig(cfg, log)
	modelCfg.Cooldowns, modelCfg.Metrics = cache.NewCooldowns(a.rdb, cfg.RedisPrefix), llm.NewMetrics(a.registry)
	// Each endpoint's requests and tokens per minute (budget.go).
	budgets, runBudgets := chatBudgets(a.rdb, cfg, a.registry, log)
	modelCfg.Budgets, modelCfg.AnswerReservation, modelCfg.BudgetWait = budgets, cfg.LLMTokenReservation, cfg.ChatMaxWait
	a.runners = append(a.runners, runBudgets...)
	models, err := llm.NewChatModels(modelCfg)
	if err != nil {
		return nil, fmt.Errorf("chat models: %w", err)
	}
	var answerModel, fastModel service.ChatModel = meteredChat{models.Answer, meter, service.UsageAnswer, cmp.Or(cfg.LLMChatModel, cfg.LLMProvider)}, nil
	if models.Fast != nil {
		fastModel = meteredChat{models.Fast, meter, service.UsageRewrite, cmp.Or(cfg.LLMFastModel, cfg.LLMChatModel, cfg.LLMProvider)}
	}
	var limiter chat.Limiter
	var limiterStats api.LimiterStats
	if cfg.ChatLimiterEnabled {
		policy, err := ratelimit.ParsePolicy(cfg.ChatOnRedisError)
		if err != nil {
			return nil, err
		}
		l := ratelimit.New(a.rdb, cfg.RedisPrefix, "chat", ratelimit.Config{
			MaxConcurrent: cfg.ChatMaxConcurrent, MaxWait: cfg.ChatMaxWait, Lease: cfg.ChatLease,
			PollInterval: cfg.ChatPollInterval, MaxQueue: cfg.ChatMaxQueue, MaxQueuedPerUser: cfg.ChatMaxQueuedPerUser,
			MaxRunningPerUser: chatRunningCap(cfg),
			OnRedisError:      policy, Logger: log, Registerer: a.registry,
		})
		a.runners = append(a.runners, l.Run)
		limiter, limiterStats = chatLimiter{l}, l
	}
	var rate chat.RateLimit
	if cfg.ChatRatePerMinute > 0 {
		rate = chatRate{r: ratelimit.NewRate(a.rdb, cfg.RedisPrefix, "chat", cfg.ChatRatePerMinute, time.Minute), log: log}
	}
	tasks := stream.NewManager(a.rdb, cfg.RedisPrefix, cfg.InstanceID, stream.Config{Logger: log})
	a.runners = append(a.runners, tasks.Run)
	// Each answer's events are kept a while in Redis, so a client that lost
	// its stream resumes it on any instance.
	journal := stream.NewJournal(a.rdb, cfg.RedisPrefix, stream.JournalConfig{
		TTL: cfg.ChatResumeTTL, MaxEvents: cfg.ChatResumeMaxEvents, Logger: log})
	chatSvc := chat.New(chat.Deps{
		Store: a.store, Limiter: limiter, Rate: rate, Tasks: tasks, Journal: journal, Retriever: searcher, Access: access,
		Intents: intentCache, Terms: termCache,
		Model: answerModel, FastModel: fastModel, IDs: ids,
	}, chat.Config{
		Tracer:               tracer("service/chat"),
		RefuseWithoutSources: cfg.ChatEmptyRetrieval == "refuse",
		AnswerModel:          cfg.LLMChatModel, FastModel: cfg.LLMFastModel, Logger: log,
		MaxAnswerTokens: cfg.ChatMaxAnswerTokens, DetachedTimeout: cfg.ChatDetachedTimeout,
	})

	// First start: the demo knowledge base, intents and term mappings, once
	// for all instances (under the startup lock).
	if cfg.Demo {
		err := a.store.WithStartupLock(ctx, func(ctx context.Context) error {
			return demo.Seed(ctx, a.store, demo.Services{KnowledgeBases: kbs, Ingest: ingestSvc, Intents: intents, Terms: terms}, log)
		})
		if err != nil {
			return nil, fmt.Errorf("demo data: %w", err)
		}
	}

	// Upload concurrency across instances.
	uploads := ratelimit.NewSemaphore(a.rdb, cfg.RedisPrefix, "upload", ratelimit.Config{
		MaxConcurrent: cfg.UploadMaxConcurrent, MaxWait: cfg.UploadMaxWait, Logger: log, Registerer: a.registry})
	a.runners = append(a.runners, uploads.Run)

	// API keys: checked against Postgres on every request (revocation is
	// instant everywhere); each key has its own request rate in Redis, and
	// its chats count against its owner's chat rate and fair-queue share.
	var keyRate *ratelimit.Rate
	if cfg.APIKeyRatePerMinute > 0 {
		keyRate = ratelimit.NewRate(a.rdb, cfg.RedisPrefix, "apikey", cfg.APIKeyRatePerMinute, time.Minute)
	}
	apiKeys := auth.NewAPIKeys(a.store, access, ids, audit, auth.Config{Logger: log, KeyMaxTTL: cfg.APIKeyMaxTTL})
	apiKeys.LimitFailures(loginAttempts{cache.NewAuthState(a.rdb, cfg.RedisPrefix)}, authConfig(cfg, nil, log))
	// Sessions have a request rate too, per user (README "Capacity").
	var sessionRate *ratelimit.Rate
	if cfg.SessionRatePerMinute > 0 {
		sessionRate = ratelimit.NewRate(a.rdb, cfg.RedisPrefix, "session", cfg.SessionRatePerMinute, time.Minute)
	}

	// The MCP server: the same use cases, for API keys, at /mcp.
	a.mcp = mcp.New(mcp.Deps{
		Log: log, APIKeys: apiKeys, KeyRate: keyRate, KnowledgeBases: kbs, Ingest: ingestSvc, Search: searcher, Chat: chatSvc,
	}, mcp.Config{
		MaxSessions: cfg.MCPMaxSessions, MaxSessionsPerKey: cfg.MCPMaxSessionsPerKey, SessionIdle: cfg.MCPSessionIdle, Version: version,
	})

	a.router = api.NewRouter(api.Deps{
		Log:               log,
		Auth:              authSvc,
		APIKeys:           apiKeys,
		KeyRate:           keyRate,
		SessionRate:       sessionRate,
		KnowledgeBases:    kbs,
		Groups:            admin.NewGroups(a.store, ids, audit),
		Quotas:            quotas,
		Audit:             admin.NewAudit(a.store),
		Auditor:           audit,
		Ingest:            ingestSvc,
		Search:            searcher,
		Chat:              chatSvc,
		Intents:           intents,
		Terms:             terms,
		Locks:             submitLocks,
		Responses:         responses,
		ChatLimiter:       limiterStats,
		ChatMaxConcurrent: cfg.ChatMaxConcurrent,
		UploadSemaphore:   uploads,
		UploadMaxWait:     cfg.UploadMaxWait,
		UploadMaxBytes:    cfg.UploadMaxBytes,
		Registry:          a.registry,
		SecureCookie:      cfg.SecureCookie,
		TrustedProxies:    cfg.TrustedProxies,
		AllowedOrigins:    cfg.AllowedOrigins,
		BodyTimeout:       cfg.HTTPBodyTimeout,
		PingInterval:      cfg.SSEKeepAlive,
		UploadBodyTimeout: cfg.HTTPUploadTimeout,
		MetricsElsewhere:  !cfg.MetricsPublic,
		Pingers:           a.pingers(q, osc),
		MCP:               a.mcp,
	})

	// Metrics on their own address, bound now so a bad address fails the
	// start. Workers serve them too: they have no API port.
	if cfg.MetricsAddr != "" {
		if a.metricsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return nil, fmt.Errorf("RAGENT_METRICS_ADDR: %w", err)
		}
		a.closers = append(a.closers, func(context.Context) error {
			if err := a.metricsLn.Close(); !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil
		})
	}
	return a, nil
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- err
			}
		}()
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
	store, err := repository.Open(ctx, cfg.DatabaseURL, repository.Config{Logger: log, MaxOpenConns: 2})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	log.Info("migrations applied")
	return nil
}
