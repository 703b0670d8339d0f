package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	"github.com/ragent-go/ragent/stream"
)

// newApp connects to every dependency, migrates and bootstraps under the
// startup lock, and wires the use cases. It starts nothing yet: Run does.
// Each section is a builder below; parts carries what one section hands
// to the next.
func newApp(ctx context.Context, cfg Config, log *slog.Logger) (_ *App, err error) {
	a := &App{cfg: cfg, log: log, registry: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			a.Close(context.Background())
		}
	}()
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w := &parts{}
	for _, build := range []func(context.Context, *parts) error{
		a.buildFoundations, a.buildAccounts, a.buildKnowledgeAndSearch, a.buildIngestion,
		a.buildChat, a.seedDemo, a.buildHTTP,
	} {
		if err := build(ctx, w); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// parts is what the builders of newApp hand on to the later ones.
type parts struct {
	tracer  func(pkg string) trace.Tracer
	ids     idSource
	audit   *service.Auditor
	authSvc *auth.Service
	sso     *auth.SSO // nil without single sign-on
	signing []byte    // also seals the webhooks' secrets
	access  *service.Access

	embedder service.Embedder
	space    service.EmbeddingSpace
	osc      *opensearch.Client // nil unless RAGENT_SEARCH_BACKEND=opensearch
	q        *queue

	intentCache *cache.Intents
	termCache   *cache.Terms
	intents     *admin.Intents
	terms       *admin.Terms
	chatSvc     *chat.Service
	// limiterStats is nil with the chat limiter off.
	limiterStats api.LimiterStats
}

// buildFoundations: traces, Postgres, Redis, Snowflake ids and the audit
// log.
func (a *App) buildFoundations(ctx context.Context, w *parts) error {
	cfg, log := a.cfg, a.log
	// Traces: spans of chat turns and documents over OTLP when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set, none otherwise. Flushed last.
	tp, shutdownTracing, err := newTracing(ctx, cfg)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, shutdownTracing)
	w.tracer = func(pkg string) trace.Tracer { return tp.Tracer("github.com/ragent-go/ragent/" + pkg) }

	// Postgres: the source of truth. Migrations and first-start bootstrap run
	// under one advisory lock, so many instances can start at once.
	a.store, err = repository.Open(ctx, cfg.DatabaseURL, repository.Config{Logger: log, MaxOpenConns: cfg.DatabaseMaxConns})
	if err != nil {
		return err
	}
	a.closers = append(a.closers, func(context.Context) error { return a.store.Close() })

	// Redis: coordination state and caches, one client for every mechanism,
	// on a single node, behind Sentinel or a Cluster.
	if a.rdb, err = redisconn.New(cfg.redisOptions()); err != nil {
		return fmt.Errorf("RAGENT_REDIS_*: %w", err)
	}
	a.closers = append(a.closers, func(context.Context) error { return a.rdb.Close() })
	// Redis must never evict: attempt counters, leases and queues live there.
	if err := checkRedisEviction(ctx, a.rdb, cfg.RedisAllowEviction, log); err != nil {
		return err
	}

	// Snowflake IDs: a fixed worker id needs no Redis at start.
	if cfg.WorkerID >= 0 {
		a.ids = idgen.New(int64(cfg.WorkerID), idgen.Config{Logger: log})
	} else if a.ids, err = idgen.Lease(ctx, a.rdb, cfg.RedisPrefix, idgen.Config{Logger: log, LeaseTTL: cfg.WorkerLeaseTTL, LeaseRenew: cfg.WorkerLeaseRenew}); err != nil {
		return fmt.Errorf("lease a snowflake worker id (or set RAGENT_WORKER_ID): %w", err)
	}
	a.closers = append(a.closers, a.ids.Close)
	w.ids = idSource{a.ids}
	// Every audited change writes its event in its own transaction (docs/security.md
	// "Audit log").
	// Refusals coalesce and failed sign-ins expire (docs/security.md "Audit log");
	// the same hourly turn drops the chat submit keys past the
	// Idempotency-Key window (docs/operations.md "Idempotency").
	w.audit = service.NewAuditor(a.store, a.store, w.ids, service.AuditorConfig{
		Logger: log, CoalesceWindow: cfg.AuditCoalesceWindow, LoginRetention: cfg.AuditLoginRetention, Pruner: a.store,
		Retentions: []service.Retention{chatSubmitRetention(a.store)},
	})
	a.runners = append(a.runners, w.audit.Run)
	return nil
}

// chatSubmitRetention prunes the chat submit keys (chat_submits) past the
// Idempotency-Key window: a chat's key is honoured as long as any other
// route's stored response is replayed, and a retry after it is a new
// question, whose key the table would otherwise keep for ever.
func chatSubmitRetention(s *repository.Store) service.Retention {
	return service.Retention{What: "chat submit keys", Age: idempotent.DefaultResponseTTL, Delete: s.PruneChatSubmits}
}

// buildKnowledgeAndSearch: the embedder behind the cluster-wide gate, the
// reranker, knowledge bases and the searcher on Postgres or OpenSearch.
func (a *App) buildKnowledgeAndSearch(ctx context.Context, w *parts) error {
	cfg, log := a.cfg, a.log
	var err error
	// Knowledge: embeddings (every call behind one cluster-wide fair
	// limit), retrieval, ingestion.
	gate, runGate := newEmbedGate(a.rdb, cfg, a.registry, log)
	a.runners = append(a.runners, runGate)
	embedCfg := llmConfig(cfg, log)
	embedCfg.EmbeddingGate, embedCfg.EmbedMetrics = gate, llm.NewEmbedMetrics(a.registry)
	embedder, err := llm.NewEmbedder(embedCfg)
	if err != nil {
		return fmt.Errorf("embedder: %w", err)
	}
	w.space = llm.Space(embedder)
	w.embedder = meteredEmbedder{Embedder: embedder, meter: a.meter}
	var reranker retrieve.Reranker
	if cfg.RerankModel != "" {
		rerankCfg := llmConfig(cfg, log)
		var runBudget func(context.Context) error
		if rerankCfg.RerankBudget, runBudget = rerankBudget(a.rdb, cfg, a.registry, log); runBudget != nil {
			rerankCfg.BudgetWait = cfg.ChatMaxWait
			a.runners = append(a.runners, runBudget)
		}
		reranker = meteredReranker{llm.NewReranker(cmp.Or(cfg.RerankBaseURL, cfg.LLMBaseURL), cfg.LLMAPIKey, cfg.RerankModel, rerankCfg),
			a.meter, cfg.RerankModel}
	}
	// One access resolver decides, for every feature, which knowledge bases
	// a caller may read and change.
	w.access = service.NewAccess(a.store)
	a.kbs = admin.NewKnowledgeBases(a.store, w.access, w.ids, admin.EmbeddingDefaults{
		Space: w.space, VectorWeight: retrieve.DefaultVectorWeight(embedderKind(cfg)),
	}, w.audit)
	// Keyword search runs in Postgres or, with RAGENT_SEARCH_BACKEND=opensearch,
	// in OpenSearch, which the store then keeps in line through the outbox.
	var searchStore retrieve.Store = a.store
	if cfg.SearchBackend == "opensearch" {
		if w.osc, err = a.openSearch(ctx, w.ids); err != nil {
			return err
		}
		searchStore = openSearchStore{Store: a.store, os: w.osc}
	} else if err := a.store.WithStartupLock(ctx, a.repairKeywordIndex); err != nil {
		return err
	}
	a.searcher = retrieve.New(searchStore, w.access, queryEmbedders(w.embedder, w.space), reranker, retrieve.Config{
		Tracer:         w.tracer("service/retrieve"),
		MinVectorScore: cfg.SearchMinVectorScore, Fusion: retrieve.Fusion(cfg.SearchFusion), Logger: log,
		MinRerankScore: cfg.RerankMinScore,
	})
	return nil
}

// buildIngestion: the parser, the ingestion use case with its optional
// jobs, the re-embedding plan, the MQ, its relay, reaper and consumers.
func (a *App) buildIngestion(ctx context.Context, w *parts) error {
	cfg, log := a.cfg, a.log
	parser, closeParser, err := newParser(cfg, log)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, func(context.Context) error { return closeParser() })
	ingestSvc := ingest.New(a.store, w.access, w.embedder, w.ids, w.audit, ingest.Config{
		Registerer: a.registry, Tracer: w.tracer("service/ingest"),

		MaxBytes:           cfg.UploadMaxBytes,
		Limits:             parse.Limits{MaxTextBytes: cfg.IngestMaxTextBytes, Timeout: cfg.IngestParseTimeout, OCR: ocrConfig(cfg)},
		MaxChunks:          cfg.IngestMaxChunks,
		Parser:             parser,
		OutboxRetention:    cfg.OutboxRetention,
		PendingTimeout:     cfg.IngestPendingTimeout,
		ConfirmAfter:       cfg.IngestConfirmAfter,
		Space:              w.space,
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
		WorkConcurrency:          ingestWorkConcurrency(cfg),
		Handlers:                 ingestHandlerCount(cfg),
		InFlightPerKB:            cfg.ingestInFlightPerKB,
	})
	ingestSvc.EnableWebhooks(a.store, w.signing)
	ingestSvc.EnableCuration(a.store)
	indexMetrics := newIndexMetrics(a.registry)
	if w.osc != nil {
		ingestSvc.EnableSearchIndex(a.store, measuredIndex{w.osc, indexMetrics})
	}
	a.ingestSvc = ingestSvc
	// Knowledge bases recorded in another embedding space move to the
	// configured one in the background; planned once for all instances.
	if err := a.store.WithStartupLock(ctx, ingestSvc.PlanReembed); err != nil {
		return err
	}

	// The MQ: the outbox relay and the reaper run on every instance; the
	// ingestion consumer on workers.
	topics := []string{service.IngestTopic}
	if w.osc != nil {
		topics = append(topics, service.SearchIndexTopic)
	}
	a.mqMetrics = mq.NewMetrics(a.registry, topics...)
	a.registry.MustRegister(newDocumentStates(a.store, log))
	q, err := newQueue(ctx, cfg, a.rdb, a)
	w.q = q
	if err != nil {
		return err
	}
	a.closers = append(a.closers, func(context.Context) error { q.close(); return nil })
	a.runners = append(a.runners,
		func(ctx context.Context) error { return ingestSvc.RunRelay(ctx, a.mqMetrics.Producer(q.producer)) },
		ingestSvc.RunReaper,
	)
	if w.osc == nil {
		// The keyword compactor: every instance runs it, one works at a
		// time (an advisory lock). A knowledge base's tail is merged once
		// it holds 20k postings, and all of it every 10 s, so queries
		// never score more than a few seconds of ingestion exhaustively.
		// On the OpenSearch backend the index is not written.
		a.runners = append(a.runners, func(ctx context.Context) error {
			return a.store.RunKeywordCompactor(ctx, time.Second, 10*time.Second, 20000)
		})
	}
	if cfg.Role != "api" {
		idem := idempotent.Config{Logger: log, Registerer: a.registry}
		guard := idempotent.NewGuard(a.rdb, cfg.RedisPrefix, consumingTTL, consumedTTL, idem)
		consumer, err := q.consumer(ingestGroup, service.IngestTopic, ingestHandler(ingestSvc, guard), ingestHandlers(cfg))
		if err != nil {
			return err
		}
		backlog := newBacklogCollector()
		backlog.add(service.IngestTopic, ingestGroup, consumer)
		a.runners = append(a.runners, consumer.Run, ingestSvc.RunFetcher, ingestSvc.RunWebhooks)
		if w.osc != nil {
			consumer, err := q.consumer(searchIndexGroup, service.SearchIndexTopic, searchIndexHandler(ingestSvc), searchIndexConcurrency)
			if err != nil {
				return err
			}
			backlog.add(service.SearchIndexTopic, searchIndexGroup, consumer)
			a.runners = append(a.runners, consumer.Run)
		}
		a.registry.MustRegister(backlog)
	}
	return nil
}

// buildChat: the intent tree and term mappings behind their caches, the
// models, the fair queue in front of them, the cross-instance stop and the
// journal of answers, and the chat use case.
func (a *App) buildChat(ctx context.Context, w *parts) error {
	cfg, log := a.cfg, a.log
	// Admin data: the intent tree and term mappings, read (by admins and the
	// chat pipeline) through 7-day Redis caches that fall back to Postgres.
	cacheCfg := cache.Config{Metrics: cache.NewMetrics(a.registry), Logger: log}
	w.intentCache = cache.NewIntents(a.rdb, cfg.RedisPrefix, a.store, cacheCfg)
	w.termCache = cache.NewTerms(a.rdb, cfg.RedisPrefix, a.store, cacheCfg)
	w.intents = admin.NewIntents(a.store, w.intentCache, w.intentCache, w.ids, w.audit, admin.Config{Logger: log})
	w.terms = admin.NewTerms(a.store, w.termCache, w.termCache, w.ids, w.audit, admin.Config{Logger: log})

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
		return fmt.Errorf("chat models: %w", err)
	}
	var answerModel, fastModel service.ChatModel = meteredChat{models.Answer, a.meter, service.UsageAnswer, cmp.Or(cfg.LLMChatModel, cfg.LLMProvider)}, nil
	if models.Fast != nil {
		fastModel = meteredChat{models.Fast, a.meter, service.UsageRewrite, cmp.Or(cfg.LLMFastModel, cfg.LLMChatModel, cfg.LLMProvider)}
	}
	var limiter chat.Limiter
	if cfg.ChatLimiterEnabled {
		policy, err := ratelimit.ParsePolicy(cfg.ChatOnRedisError)
		if err != nil {
			return err
		}
		l := ratelimit.New(a.rdb, cfg.RedisPrefix, "chat", ratelimit.Config{
			MaxConcurrent: cfg.ChatMaxConcurrent, MaxWait: cfg.ChatMaxWait, Lease: cfg.ChatLease,
			PollInterval: cfg.ChatPollInterval, MaxQueue: cfg.ChatMaxQueue, MaxQueuedPerUser: cfg.ChatMaxQueuedPerUser,
			MaxRunningPerUser: chatRunningCap(cfg),
			OnRedisError:      policy, Logger: log, Registerer: a.registry,
		})
		a.runners = append(a.runners, l.Run)
		limiter, w.limiterStats = chatLimiter{l}, l
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
	w.chatSvc = chat.New(chat.Deps{
		Store: a.store, Limiter: limiter, Rate: rate, Tasks: tasks, Journal: journal, Retriever: a.searcher, Access: w.access,
		Intents: w.intentCache, Terms: w.termCache,
		Model: answerModel, FastModel: fastModel, IDs: w.ids, Feedback: a.store,
	}, chat.Config{
		Tracer:               w.tracer("service/chat"),
		RefuseWithoutSources: cfg.ChatEmptyRetrieval == "refuse",
		AnswerModel:          cfg.LLMChatModel, FastModel: cfg.LLMFastModel, Logger: log,
		MaxAnswerTokens: cfg.ChatMaxAnswerTokens, DetachedTimeout: cfg.ChatDetachedTimeout,
	})
	return nil
}

// seedDemo loads the demo data on the first start.
func (a *App) seedDemo(ctx context.Context, w *parts) error {
	cfg, log := a.cfg, a.log
	// First start: the demo knowledge base, intents and term mappings, once
	// for all instances (under the startup lock).
	if !cfg.Demo {
		return nil
	}
	err := a.store.WithStartupLock(ctx, func(ctx context.Context) error {
		return demo.Seed(ctx, a.store, demo.Services{KnowledgeBases: a.kbs, Ingest: a.ingestSvc, Intents: w.intents, Terms: w.terms}, log)
	})
	if err != nil {
		return fmt.Errorf("demo data: %w", err)
	}
	return nil
}

// buildHTTP: idempotency, upload slots, API keys and request rates, the MCP
// server, the router and the metrics listener.
func (a *App) buildHTTP(ctx context.Context, w *parts) error {
	cfg, log := a.cfg, a.log
	var err error
	// Idempotent submit: a duplicate of an in-flight request is refused (the
	// lock's 30 s TTL only bounds a crashed holder: the watchdog renews it),
	// and an Idempotency-Key's first response is replayed for 24 h.
	idem := idempotent.Config{Logger: log, Registerer: a.registry}
	submitLocks := idempotent.NewLocks(a.rdb, cfg.RedisPrefix, 30*time.Second, idem)
	responses := idempotent.NewResponses(a.rdb, cfg.RedisPrefix, 5*time.Minute, idempotent.DefaultResponseTTL, idem)

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
	apiKeys := auth.NewAPIKeys(a.store, w.access, w.ids, w.audit, auth.Config{Logger: log, KeyMaxTTL: cfg.APIKeyMaxTTL})
	apiKeys.LimitFailures(loginAttempts{cache.NewAuthState(a.rdb, cfg.RedisPrefix)}, authConfig(cfg, nil, log))
	// Sessions have a request rate too, per user (docs/security.md "Capacity").
	var sessionRate *ratelimit.Rate
	if cfg.SessionRatePerMinute > 0 {
		sessionRate = ratelimit.NewRate(a.rdb, cfg.RedisPrefix, "session", cfg.SessionRatePerMinute, time.Minute)
	}

	// The MCP server: the same use cases, for API keys, at /mcp.
	a.mcp = mcp.New(mcp.Deps{
		Log: log, APIKeys: apiKeys, KeyRate: keyRate, KnowledgeBases: a.kbs, Ingest: a.ingestSvc, Search: a.searcher, Chat: w.chatSvc,
	}, mcp.Config{
		MaxSessions: cfg.MCPMaxSessions, MaxSessionsPerKey: cfg.MCPMaxSessionsPerKey, SessionIdle: cfg.MCPSessionIdle, Version: version,
	})

	a.router = api.NewRouter(api.Deps{
		Log:              log,
		Auth:             w.authSvc,
		SSO:              w.sso,
		SSOName:          cfg.OIDCDisplayName,
		PasswordLoginOff: !cfg.PasswordLogin,
		APIKeys:          apiKeys,
		KeyRate:          keyRate,
		// Widget keys carry their own per-origin and per-visitor rates.
		WidgetRate:        ratelimit.NewRate(a.rdb, cfg.RedisPrefix, "widget", 0, time.Minute),
		SessionRate:       sessionRate,
		KnowledgeBases:    a.kbs,
		Groups:            admin.NewGroups(a.store, w.ids, w.audit),
		Quotas:            a.quotas,
		Audit:             admin.NewAudit(a.store),
		Auditor:           w.audit,
		Ingest:            a.ingestSvc,
		Search:            a.searcher,
		Chat:              w.chatSvc,
		Intents:           w.intents,
		Terms:             w.terms,
		Locks:             submitLocks,
		Responses:         responses,
		ChatLimiter:       w.limiterStats,
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
		Pingers:           a.pingers(w.q, w.osc),
		MCP:               a.mcp,
	})

	// Metrics on their own address, bound now so a bad address fails the
	// start. Workers serve them too: they have no API port.
	if cfg.MetricsAddr != "" {
		if a.metricsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("RAGENT_METRICS_ADDR: %w", err)
		}
		a.closers = append(a.closers, func(context.Context) error {
			if err := a.metricsLn.Close(); !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil
		})
	}
	return nil
}
