# ragent — the two commands: `make run` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
BIN       ?= bin/ragent
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
MQ_DRIVER ?= $(or $(RAGENT_MQ_DRIVER),redis)
SEARCH_BACKEND ?= $(or $(RAGENT_SEARCH_BACKEND),postgres)

# Services `make run` needs: RocketMQ only when it is the configured driver,
# OpenSearch only when it is the configured search backend (it then listens on
# 127.0.0.1:9200, RAGENT_OPENSEARCH_URL's default).
RUN_SERVICES := postgres redis $(if $(filter rocketmq,$(MQ_DRIVER)),rocketmq,) \
	$(if $(filter opensearch,$(SEARCH_BACKEND)),opensearch,)

# Packages whose tests run under the race detector: all but the RocketMQ
# driver, whose client library reports races inside itself, and cmd/ragent,
# whose end-to-end tests run from one race binary in E2E_SHARDS processes at
# once (scripts/testshards.sh: they wait on services far more than they use
# the CPU; serially they took 45 minutes on a busy 2-core machine).
RACE_PKGS = $(shell $(GO) list ./... | grep -v -e '/mq/rocketmq' -e '/cmd/ragent$$')
E2E_SHARDS ?= 3

.PHONY: help
help:
	@echo "make run    start Postgres+pgvector, Redis (RocketMQ with RAGENT_MQ_DRIVER=rocketmq, OpenSearch with RAGENT_SEARCH_BACKEND=opensearch), the local embedding model, build, serve on :8080"
	@echo "make test   start every service, then gofmt, go vet, staticcheck, the dependency check and all tests, then make compose-test"
	@echo "make build  build $(BIN)"
	@echo "make compose-test  build the Docker Compose stack, bring it up and run its smoke test (scripts/compose.sh smoke, then with COMPOSE_PROFILES=scale)"

.PHONY: build
build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags nomsgpack -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ragent

.PHONY: services
services:
	SERVICES="$(RUN_SERVICES)" bash scripts/services.sh start >/dev/null

# The local embedding model (scripts/services.sh start embedder) unless an
# embedding provider is configured: when it is healthy its settings are
# exported for ragent; when it cannot be installed or started, ragent runs
# with the offline embedder, and says so loudly.
EMBEDDER_ENV := bin/embedder.env

.PHONY: run
run: services build
	@rm -f $(EMBEDDER_ENV)
	@if [[ -n "$${RAGENT_EMBEDDING_PROVIDER:-}" ]]; then \
		echo "ragent: embeddings from RAGENT_EMBEDDING_PROVIDER=$$RAGENT_EMBEDDING_PROVIDER (the local embedding model is not started)"; \
	elif bash scripts/services.sh start embedder >$(EMBEDDER_ENV).tmp; then \
		mv $(EMBEDDER_ENV).tmp $(EMBEDDER_ENV); \
		echo "ragent: semantic search with the local embedding model (multilingual-e5-small on ONNX Runtime)"; \
	else \
		rm -f $(EMBEDDER_ENV).tmp; \
		echo; \
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
		echo "!! ragent: the LOCAL EMBEDDING MODEL COULD NOT BE STARTED (see the errors above)."; \
		echo "!! Running with the OFFLINE embedder: search matches WORDS ONLY, no semantic"; \
		echo "!! search. Fix it and run 'bash scripts/services.sh start embedder', or set"; \
		echo "!! RAGENT_EMBEDDING_PROVIDER to an embedding API."; \
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
		echo; \
	fi
	@echo "ragent: serving on http://localhost$${RAGENT_HTTP_ADDR:-:8080} (offline LLM unless RAGENT_LLM_PROVIDER is set)"
	@echo "ragent: the first start prints the admin username and password below; later starts reuse them"
	if [[ -f $(EMBEDDER_ENV) ]]; then source $(EMBEDDER_ENV); fi; RAGENT_MQ_DRIVER=$(MQ_DRIVER) RAGENT_SEARCH_BACKEND=$(SEARCH_BACKEND) exec ./$(BIN) serve

# Everything the tests need: the three servers, Redis behind Sentinel and a
# Redis Cluster (the topology passes below), Chromium with CJK fonts for
# the browser tests, the official OpenAI SDKs (Python and Node) for the
# OpenAI-compatible API's tests, the local embedding model for the semantic
# ones, an OpenSearch node for the opensearch search backend's, curl and jq
# for the pipeline script of docs/pipelines.md, Keycloak (the identity
# provider of the single sign-on tests), and Tesseract with pdftoppm for OCR.
TEST_SERVICES := postgres redis redis-sentinel redis-cluster rocketmq browser clients embedder opensearch keycloak tools ocr

.PHONY: test-services
test-services:
	bash scripts/services.sh start $(TEST_SERVICES) >/dev/null

.PHONY: vet
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# staticcheck, pinned, fetched from the Go module proxy on first use.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: lint
lint:
	$(GO) run $(STATICCHECK) ./...

.PHONY: depcheck
depcheck:
	$(GO) test -count=1 ./internal/archtest/

# Everything CI runs. Missing services fail the run (RAGENT_REQUIRE_SERVICES=1).
# Last, the Docker Compose stack's smoke tests (compose-test, both profiles):
# warm (images cached on the machine) 4–8 min for both. Their images are
# built in the background from the start (compose.sh prebuild; the smoke
# waits for it): a cold build (engine, Compose from source, base image,
# every image) took 17.5 min but only 4 CPU-minutes on a loaded 2-core
# machine (2026-12-02) — downloads, which the Go tests hide. Each phase
# prints its start time, for reading a CI log.
# cmd/ragent's end-to-end tests take about 14–21 minutes under -race on a
# 2-core machine (2026-11-30); the timeout leaves room for a loaded one.
# The Redis-backed suites run again on Sentinel and on a Redis Cluster
# (RAGENT_TEST_REDIS_TOPOLOGY; the first run was on the single node): these
# packages whole, and cmd/ragent's multi-instance tests of the queue, stop,
# resume, usage and quotas, and the chat submit key behind a lost lock.
# Tests that reach the single node directly (proxies, cut connections) skip
# themselves in these passes. Both passes together, the e2e build included:
# 284 s on a loaded 2-core machine (2026-12-01).
REDIS_PKGS := ./ratelimit/ ./idempotent/ ./stream/ ./cache/ ./internal/lease/ ./internal/testenv/ ./internal/redisconn/ ./mq/redisstream/ ./idgen/
# cmd/ragent's test binary is built once for both passes (go test would
# link and vet it again each time).
REDIS_E2E_BIN := bin/ragent-e2e.test
REDIS_E2E  := TestChatFairShareBetweenUsers|TestChatFairQueueAcrossInstances|TestChatStopAcrossInstances|TestOpenAIStopByTask|TestRedeliveryAfterLostConsumeMark|TestChatResumeAcrossInstances|TestUsageRecordedAcrossInstances|TestQuotasAcrossInstances|TestChatSubmitKeyAfterLostLock

.PHONY: test
test: test-services
	bash scripts/compose.sh prebuild
	@echo "make test: vet, lint, depcheck from $$(date -u +%T)"
	$(MAKE) vet lint depcheck
	@echo "make test: race suite from $$(date -u +%T)"
	RAGENT_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 20m $(RACE_PKGS)
	$(GO) test -race -c -o $(REDIS_E2E_BIN) ./cmd/ragent/
	@echo "make test: cmd/ragent in $(E2E_SHARDS) shards from $$(date -u +%T)"
	RAGENT_REQUIRE_SERVICES=1 RAGENT_TEST_QUIET=1 bash scripts/testshards.sh $(REDIS_E2E_BIN) cmd/ragent $(E2E_SHARDS) 30m
	@echo "make test: Redis Sentinel and Cluster from $$(date -u +%T)"
	for topology in sentinel cluster; do \
		RAGENT_REQUIRE_SERVICES=1 RAGENT_TEST_REDIS_TOPOLOGY=$$topology $(GO) test -race -count=1 -timeout 10m $(REDIS_PKGS) || exit 1; \
		(cd cmd/ragent && RAGENT_REQUIRE_SERVICES=1 RAGENT_TEST_REDIS_TOPOLOGY=$$topology \
			$(CURDIR)/$(REDIS_E2E_BIN) -test.count=1 -test.timeout=10m -test.run '^($(REDIS_E2E))$$') || exit 1; \
	done
	@echo "make test: Redis failover chaos (RELIABILITY.md) from $$(date -u +%T)"
	bash scripts/chaos.sh redis-failover
	@echo "make test: RocketMQ from $$(date -u +%T)"
	RAGENT_REQUIRE_SERVICES=1 $(GO) test -count=1 -timeout 15m ./mq/rocketmq/...
	RAGENT_REQUIRE_SERVICES=1 $(GO) test -count=1 -timeout 10m -run RocketMQ ./cmd/ragent/
	@echo "make test: compose from $$(date -u +%T)"
	$(MAKE) compose-test
	@echo "make test: passed at $$(date -u +%T)"

# The Docker Compose stack (docker-compose.yml) built, started on a project
# of its own and smoke-tested through ragent's published port, then the
# scale profile through its load balancer (scripts/compose.sh; docs/operations.md
# "Docker Compose").
.PHONY: compose-test
compose-test:
	bash scripts/compose.sh smoke
	COMPOSE_PROFILES=scale bash scripts/compose.sh smoke

# The Redis failover test (RELIABILITY.md), without the race detector: it
# measures timing. About 2.5 minutes (three scenarios) on a loaded 2-core
# machine (2026-12-02). A step of make test (after the topology suites);
# this target runs it alone.
.PHONY: chaos
chaos: test-services
	bash scripts/chaos.sh redis-failover

.PHONY: bench
bench: test-services
	RAGENT_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench . -benchtime 1x ./...

# Retrieval at scale (BENCHMARKS.md): heavy, minutes to hours; knobs SIZES,
# LANGS, QUERIES, INGEST, DIM, PROFILE as environment variables.
.PHONY: scalebench
scalebench:
	bash scripts/scalebench.sh

.PHONY: clean
clean:
	rm -rf bin
