package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/cache"
	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/mq"
	"github.com/ragent-go/ragent/mq/redisstream"
	"github.com/ragent-go/ragent/mq/rocketmq"
	"github.com/ragent-go/ragent/oidc"
	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/auth"
	"github.com/ragent-go/ragent/service/ingest"
	"github.com/ragent-go/ragent/service/ingest/parse"
	"github.com/ragent-go/ragent/service/retrieve"
)

// This file holds the small adapters that join a mechanism or an adapter to
// an interface a use case declares (DESIGN §1 rule 6).

// ingestGroup is the consumer group of the ingestion workers.
const ingestGroup = "ragent-ingest"

// embedderKind is the kind of the configured embedder, which the tuned
// retrieval defaults depend on (retrieve.DefaultFusion and the others).
func embedderKind(cfg Config) retrieve.EmbedderKind {
	switch {
	case cfg.EmbedProvider == "offline":
		return retrieve.OfflineEmbedder
	case llm.IsLocalEmbeddingModel(cfg.EmbedModel):
		return retrieve.LocalEmbedder
	}
	return retrieve.OtherEmbedder
}

func llmConfig(cfg Config, log *slog.Logger) llm.Config {
	return llm.Config{
		Provider: cfg.LLMProvider, BaseURL: cfg.LLMBaseURL, APIKey: cfg.LLMAPIKey,
		APIVersion: cfg.LLMAPIVersion, Region: cfg.LLMRegion,
		ChatModel: cfg.LLMChatModel, FastModel: cfg.LLMFastModel,
		Thinking: cfg.LLMThinking, ThinkingModel: cfg.LLMThinkingModel, ThinkingBudget: cfg.LLMThinkingBudget,
		Fallbacks: cfg.LLMFallbacks, Cooldown: cfg.LLMCooldown,
		EmbeddingProvider: cfg.EmbedProvider, EmbeddingModel: cfg.EmbedModel,
		EmbeddingBaseURL: cfg.EmbedBaseURL, EmbeddingAPIKey: cfg.EmbedAPIKey, EmbeddingDim: cfg.EmbedDim,
		EmbeddingQueryBaseURL: cfg.EmbedQueryBaseURL, EmbeddingBatchSize: cfg.EmbedBatchSize,
		EmbeddingKinds: llm.EmbedKinds{
			QueryPrefix: cfg.EmbedQueryPrefix, DocumentPrefix: cfg.EmbedDocumentPrefix,
			QueryInputType: cfg.EmbedQueryInputType, DocumentInputType: cfg.EmbedDocumentInputType,
		},
		FirstTokenTimeout: cfg.LLMFirstTokenTimeout, IdleTimeout: cfg.LLMIdleTimeout,
		Logger:               log,
		EmbeddingConcurrency: cfg.EmbedConcurrency,
	}
}

// queue is the configured MQ driver's producer and a way to build consumers.
type queue struct {
	producer interface {
		mq.Producer
		mq.Pinger
	}
	// consumer subscribes h; concurrency bounds its handlers running at
	// once (0: the driver's default).
	consumer func(group, topic string, h mq.Handler, concurrency int) (mq.Consumer, error)
	close    func()
}

func newQueue(ctx context.Context, cfg Config, rdb redis.UniversalClient, a *App) (*queue, error) {
	switch cfg.MQDriver {
	case "rocketmq":
		rocketmq.SetClientLogger(a.log)
		// Consumers fail with "route info not found" until the topic exists.
		if err := rocketmq.CreateTopic(ctx, cfg.RocketMQNamesrv, cfg.RocketMQBroker, service.IngestTopic, ingestGroup); err != nil {
			a.log.Warn("could not create the ingest topic; uploads queue in the outbox until RocketMQ is reachable", "err", err)
		}
		if cfg.SearchBackend == "opensearch" {
			if err := rocketmq.CreateTopic(ctx, cfg.RocketMQNamesrv, cfg.RocketMQBroker, service.SearchIndexTopic, searchIndexGroup); err != nil {
				a.log.Warn("could not create the search-index topic; changes queue in the outbox until RocketMQ is reachable", "err", err)
			}
		}
		p, err := rocketmq.NewProducer(cfg.RocketMQNamesrv, rocketmq.ProducerConfig{Instance: cfg.InstanceID})
		if err != nil {
			return nil, fmt.Errorf("rocketmq producer: %w", err)
		}
		return &queue{
			producer: p,
			consumer: func(group, topic string, h mq.Handler, concurrency int) (mq.Consumer, error) {
				return rocketmq.NewConsumer(cfg.RocketMQNamesrv, group, topic, h, rocketmq.ConsumerConfig{
					Instance: cfg.InstanceID, Logger: a.log, Concurrency: concurrency, Metrics: a.mqMetrics,
				})
			},
			close: func() { p.Close() },
		}, nil
	default:
		p := redisstream.NewProducer(rdb, redisstream.ProducerConfig{Prefix: cfg.RedisPrefix})
		return &queue{
			producer: p,
			consumer: func(group, topic string, h mq.Handler, concurrency int) (mq.Consumer, error) {
				return redisstream.NewConsumer(rdb, group, topic, h, redisstream.ConsumerConfig{
					Prefix: cfg.RedisPrefix, Consumer: cfg.InstanceID, Logger: a.log, Concurrency: concurrency,
					VisibilityTimeout: cfg.MQVisibilityTimeout, Metrics: a.mqMetrics,
				})
			},
			close: func() {},
		}, nil
	}
}

// newParser decides where uploaded files are parsed: by default in child
// processes running this same binary's `parse` command, which a timeout or
// the memory cap really stops (a goroutine cannot be stopped from outside).
// The returned func ends the idle children.
func newParser(cfg Config, log *slog.Logger) (parse.Parser, func() error, error) {
	if cfg.Role != "api" {
		checkOCR(context.Background(), cfg, log) // a worker says at start what OCR it can do
	}
	if cfg.IngestParser == "inprocess" {
		return parse.InProcess{}, func() error { return nil }, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("parser process: locate this binary: %w", err)
	}
	p := &parse.ChildParser{Command: []string{exe, "parse"}, MemoryLimit: cfg.IngestParserMemory, Log: log}
	return p, p.Close, nil
}

// ingestHandler runs ingestion behind the consume guard and translates the
// outcomes into the MQ's delivery contract.
func ingestHandler(svc *ingest.Service, guard *idempotent.Guard) mq.Handler {
	guarded := guard.Wrap(ingestGroup, func(ctx context.Context, _ string, body []byte) error {
		return svc.Process(ctx, body)
	})
	return func(ctx context.Context, m mq.Message) error {
		err := guarded(ctx, m.Key, m.Body)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ingest.ErrGaveUp):
			return mq.Permanent(err)
		case errors.Is(err, idempotent.ErrInFlight):
			return fmt.Errorf("%w: %v", mq.ErrRetryLater, err)
		}
		return err
	}
}

// consumeTTLs: a running handler's mark is renewed while it runs, so the
// CONSUMING lease only bounds how long a crashed worker delays redelivery;
// CONSUMED outlives the MQ's redelivery horizon.
const (
	consumingTTL = 60 * time.Second
	consumedTTL  = 24 * time.Hour
)

// authConfig is the auth use case's configuration.
func authConfig(cfg Config, secret []byte, log *slog.Logger) auth.Config {
	return auth.Config{
		Secret: secret, TokenTTL: cfg.TokenTTL,
		MaxFailures: cfg.LoginMaxFailures, MaxUserFailures: cfg.LoginMaxFailuresPerUser,
		MaxClientFailures: cfg.LoginMaxFailuresPerIP, FailWindow: cfg.LoginFailWindow,
		PasswordLoginOff: !cfg.PasswordLogin, BreakGlassUser: cfg.AdminUsername,
		BcryptCost: cfg.bcryptCost, Logger: log,
	}
}

// newSSO turns single sign-on on when RAGENT_OIDC_ISSUER is set; nil
// otherwise. It asks the provider nothing yet (package oidc discovers at
// the first login).
func newSSO(cfg Config, authSvc *auth.Service, store auth.SSOStore) (*auth.SSO, error) {
	if cfg.OIDCIssuer == "" {
		return nil, nil
	}
	var client *http.Client
	if cfg.oidcTransport != nil {
		client = &http.Client{Timeout: 10 * time.Second, Transport: cfg.oidcTransport}
	}
	idp, err := oidc.New(oidc.Config{
		HTTPClient: client,
		Issuer:     cfg.OIDCIssuer, ClientID: cfg.OIDCClientID, ClientSecret: cfg.OIDCClientSecret,
		RedirectURL: cfg.OIDCRedirectURL, Scopes: cfg.OIDCScopes,
		UsernameClaim: cfg.OIDCUsernameClaim, GroupsClaim: cfg.OIDCGroupsClaim,
		PostLogoutRedirectURL: cfg.oidcPostLogoutURL(),
	})
	if err != nil {
		return nil, err
	}
	return auth.NewSSO(authSvc, store, idp, auth.SSOConfig{Recheck: cfg.OIDCRecheck, AdminGroups: cfg.OIDCAdminGroups}), nil
}

// loginAttempts adapts the Redis attempt counters to the auth use case's
// Attempts: the counters of one call share their group.
type loginAttempts struct{ s *cache.AuthState }

func (l loginAttempts) Reserve(ctx context.Context, counters []auth.Counter, window time.Duration) (time.Duration, error) {
	names, limits := make([]string, len(counters)), make([]int, len(counters))
	for i, c := range counters {
		names[i], limits[i] = c.Name, c.Limit
	}
	return l.s.Reserve(ctx, counters[0].Group, names, limits, window)
}

func (l loginAttempts) Release(ctx context.Context, counters []auth.Counter) error {
	names, clear := make([]string, len(counters)), make([]bool, len(counters))
	for i, c := range counters {
		names[i], clear[i] = c.Name, c.Clear
	}
	return l.s.Release(ctx, counters[0].Group, names, clear)
}

// chatLimiter adapts the fair queue to the chat use case's Limiter: queue
// timeout and queue full become service.ErrBusy carrying the queue's
// estimate of when to retry (Limiter.RetryAfter), a Redis failure under the
// reject policy service.ErrUnavailable.
type chatLimiter struct{ l *ratelimit.Limiter }

func (c chatLimiter) Acquire(ctx context.Context, requestID, userID string, onPosition func(position, queued int)) (func(), error) {
	permit, err := c.l.Acquire(ctx, requestID, userID, onPosition)
	switch {
	case err == nil:
		return permit.Release, nil
	case errors.Is(err, ratelimit.ErrTimeout), errors.Is(err, ratelimit.ErrQueueFull):
		msg := "queue full"
		if errors.Is(err, ratelimit.ErrTimeout) {
			msg = "queue wait exceeded"
		}
		return nil, &service.Error{Kind: service.ErrBusy, Message: msg, RetryAfter: c.l.RetryAfter(context.WithoutCancel(ctx))}
	case errors.Is(err, ratelimit.ErrUnavailable):
		return nil, fmt.Errorf("%w: %v", service.ErrUnavailable, err)
	}
	return nil, err
}

// chatRate adapts the per-user rate limit to the chat use case: over the
// limit is service.ErrBusy with the wait as RetryAfter. When Redis fails the
// chat is admitted (fail open) with a warning: the rate limit only guards
// the database against floods, while the fair queue, which guards the model,
// applies its own Redis-error policy to the same request right after.
type chatRate struct {
	r   *ratelimit.Rate
	log *slog.Logger
}

func (c chatRate) Allow(ctx context.Context, userID string) error {
	ok, wait, err := c.r.Allow(ctx, userID)
	switch {
	case err != nil:
		c.log.WarnContext(ctx, "chat rate limit unavailable; chat admitted", "user", userID, "err", err)
		return nil
	case !ok:
		secs := int(math.Ceil(wait.Seconds()))
		return &service.Error{Kind: service.ErrBusy, RetryAfter: wait,
			Message: fmt.Sprintf("too many questions; try again in %d s", secs)}
	}
	return nil
}

// ocrConfig is the OCR part of the parser limits.
func ocrConfig(cfg Config) parse.OCR {
	return parse.OCR{Mode: cfg.OCR, Languages: cfg.OCRLanguages, Processes: cfg.OCRProcesses, PageTimeout: cfg.OCRPageTimeout}
}

// checkOCR tells at start-up what OCR will do on this instance: a worker
// without Tesseract or without one of the configured languages still
// starts (an image without OCR only serves text documents), but says so,
// and such documents fail with the same explanation.
func checkOCR(ctx context.Context, cfg Config, log *slog.Logger) {
	if cfg.OCR == parse.OCROff {
		log.InfoContext(ctx, "ocr is off: scanned PDF pages stay empty and images are refused")
		return
	}
	have, err := parse.OCRLanguages(ctx)
	if err != nil {
		log.WarnContext(ctx, "ocr: tesseract is not installed here; scanned PDFs and images will fail (use the image with OCR, or install tesseract-ocr and poppler-utils)", "err", err)
		return
	}
	if _, err := exec.LookPath("pdftoppm"); err != nil {
		log.WarnContext(ctx, "ocr: pdftoppm (poppler-utils) is not installed here; scanned PDFs will fail", "err", err)
	}
	for _, l := range strings.Split(cfg.OCRLanguages, "+") {
		if !slices.Contains(have, l) {
			log.WarnContext(ctx, "ocr: a language of RAGENT_OCR_LANGUAGES is not installed", "language", l, "installed", strings.Join(have, "+"))
		}
	}
}
