# ragent — the two commands: `make run` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
BIN       ?= bin/ragent
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
MQ_DRIVER ?= $(or $(RAGENT_MQ_DRIVER),redis)

# Services `make run` needs: RocketMQ only when it is the configured driver.
RUN_SERVICES := postgres redis $(if $(filter rocketmq,$(MQ_DRIVER)),rocketmq,)

# Packages whose tests run under the race detector: all but the RocketMQ
# driver, whose client library reports races inside itself.
RACE_PKGS = $(shell $(GO) list ./... | grep -v '/mq/rocketmq')

.PHONY: help
help:
	@echo "make run    start Postgres+pgvector, Redis (RocketMQ with RAGENT_MQ_DRIVER=rocketmq), build, serve on :8080"
	@echo "make test   start every service, then gofmt, go vet, staticcheck, the dependency check and all tests"
	@echo "make build  build $(BIN)"

.PHONY: build
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ragent

.PHONY: services
services:
	SERVICES="$(RUN_SERVICES)" bash scripts/services.sh start >/dev/null

.PHONY: run
run: services build
	@echo "ragent: serving on http://localhost$${RAGENT_HTTP_ADDR:-:8080} (offline LLM and embeddings unless RAGENT_LLM_PROVIDER is set)"
	@echo "ragent: the first start prints the admin username and password below; later starts reuse them"
	RAGENT_MQ_DRIVER=$(MQ_DRIVER) ./$(BIN) serve

# Everything the tests need: the three servers and, for the browser tests,
# Chromium with CJK fonts, and for the README's pipeline script curl and jq.
TEST_SERVICES := postgres redis rocketmq browser tools

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
.PHONY: test
test: test-services vet lint depcheck
	RAGENT_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 30m $(RACE_PKGS)
	RAGENT_REQUIRE_SERVICES=1 $(GO) test -count=1 -timeout 15m ./mq/rocketmq/...
	RAGENT_REQUIRE_SERVICES=1 $(GO) test -count=1 -timeout 10m -run RocketMQ ./cmd/ragent/

.PHONY: bench
bench: test-services
	RAGENT_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench . -benchtime 1x ./...

.PHONY: clean
clean:
	rm -rf bin
