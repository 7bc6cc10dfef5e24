# agentd — `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GOBIN ?= $(shell go env GOPATH)/bin
export PATH := $(GOBIN):$(PATH)

# Pinned code generators (see README, "Generating code").
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GRPC_GATEWAY_VERSION       := v2.33.0
VTPROTO_VERSION            := v0.6.1-0.20240319094008-0393e58bdf10
# Pinned linters (see README, "Linting").
STATICCHECK_VERSION        := v0.8.2
GOLANGCI_LINT_VERSION      := v2.15.0

.PHONY: help
help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: run
run: ## Run agentd on its embedded defaults (memory store, simulated provider)
	go run ./cmd/agentd serve

.PHONY: build
build: ## Build bin/agentd
	go build -o bin/agentd ./cmd/agentd

.PHONY: test
test: vet lint checkgenerate ## vet, lint (buf, staticcheck, golangci-lint), generated-code check, then every test with -race, then the browser tests
	go test -race -count=1 -timeout 15m ./...
	@$(MAKE) --no-print-directory test-browser
	@$(MAKE) --no-print-directory test-summary

# What a green make test did not check, said at the end where it is seen.
.PHONY: test-summary
test-summary:
	@missing=""; \
	command -v buf >/dev/null || missing="$$missing\n  buf lint and the generated-code check (make tools)"; \
	command -v staticcheck >/dev/null || missing="$$missing\n  staticcheck (make tools)"; \
	command -v golangci-lint >/dev/null || missing="$$missing\n  golangci-lint (make tools)"; \
	command -v redis-server >/dev/null || missing="$$missing\n  the Redis tests: credential, session and topology stores (apt-get install redis-server)"; \
	{ [ -x "$(CHROMIUM)" ] && command -v npm >/dev/null; } || missing="$$missing\n  the browser tests (apt-get install chromium npm)"; \
	command -v promtool >/dev/null || missing="$$missing\n  promtool's checks of the alert rules (deploy/prometheus)"; \
	command -v kubectl >/dev/null || missing="$$missing\n  kubectl kustomize of deploy/kubernetes"; \
	if [ -n "$$missing" ]; then printf "make test passed, without:$$missing\n"; else echo "make test passed: every check ran"; fi

# Browser tests (e2e/browser): headless Chromium from Debian's chromium
# package, driven by playwright-core, against a freshly built agentd.
CHROMIUM ?= /usr/bin/chromium
export CHROMIUM

.PHONY: test-browser
test-browser: ## The console and a cross-origin page in headless Chromium (needs chromium and Node.js 20+)
	@if [ ! -x "$(CHROMIUM)" ] || ! command -v npm >/dev/null; then \
		if [ -n "$${CI:-}" ]; then echo "test-browser: $(CHROMIUM) or npm missing (apt-get install chromium)"; exit 1; fi; \
		echo "chromium or npm not installed: skipping the browser tests (apt-get install chromium)"; exit 0; fi; \
	if [ ! -d e2e/browser/node_modules/playwright-core ]; then (cd e2e/browser && npm ci --no-audit --no-fund); fi; \
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	go build -o $$tmp/agentd ./cmd/agentd; \
	cd e2e/browser && AGENTD_BIN=$$tmp/agentd npm test --silent

.PHONY: console-screenshots
console-screenshots: ## Rewrite docs/console-*.png from the browser tests
	@if [ ! -d e2e/browser/node_modules/playwright-core ]; then (cd e2e/browser && npm ci --no-audit --no-fund); fi
	cd e2e/browser && npm run screenshots --silent

.PHONY: test-short
test-short: ## Tests only (with -race), no lint or generation check
	go test -race -count=1 ./...

.PHONY: bench
bench: ## Load tests of agentd against a bare-proxy floor (~10 min, not part of test): bench/results.{md,json}, see BENCHMARKS.md
	go build -o bench/bin/agentd ./cmd/agentd
	bench/bin/agentd bench --out bench $(BENCH_ARGS)

.PHONY: bench-redis
bench-redis: ## overhead, capacity, idle-memory, fanout with agentd on the Redis store (needs redis-server): bench/redis/results.{md,json}
	go build -o bench/bin/agentd ./cmd/agentd
	bench/bin/agentd bench --store redis --out bench/redis $(BENCH_ARGS) overhead capacity idle-memory fanout

.PHONY: vet
vet: ## go vet and gofmt
	go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: tools
tools: ## Install the pinned code generators and linters into GOBIN
	go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
	go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
	go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(VTPROTO_VERSION)
	go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# A linter that is not installed is skipped with a note (make tools), but
# not in CI, which installs them.
.PHONY: lint
lint: ## buf lint, staticcheck, golangci-lint (.golangci.yml); each skipped with a note when not installed (make tools)
	@if command -v buf >/dev/null; then buf lint; else echo "buf not installed: skipping buf lint (make tools)"; fi
	@$(MAKE) --no-print-directory staticcheck golangci-lint

.PHONY: staticcheck
staticcheck: ## staticcheck ./... (its checks: staticcheck.conf)
	@if ! command -v staticcheck >/dev/null; then \
		if [ -n "$${CI:-}" ]; then echo "staticcheck not installed (make tools)"; exit 1; fi; \
		echo "staticcheck not installed: skipping it (make tools)"; exit 0; fi; \
	have=$$(staticcheck -version); case "$$have" in *"($(STATICCHECK_VERSION:v%=%))"*) ;; *) echo "staticcheck: $$have, want $(STATICCHECK_VERSION) (make tools)"; exit 1;; esac; \
	staticcheck ./...

.PHONY: golangci-lint
golangci-lint: ## golangci-lint run ./... (.golangci.yml)
	@if ! command -v golangci-lint >/dev/null; then \
		if [ -n "$${CI:-}" ]; then echo "golangci-lint not installed (make tools)"; exit 1; fi; \
		echo "golangci-lint not installed: skipping it (make tools)"; exit 0; fi; \
	have=$$(golangci-lint version --short 2>/dev/null || golangci-lint --version); case "$$have" in *"$(GOLANGCI_LINT_VERSION:v%=%)"*) ;; *) echo "golangci-lint: $$have, want $(GOLANGCI_LINT_VERSION) (make tools)"; exit 1;; esac; \
	golangci-lint run ./...

.PHONY: generate
generate: ## Regenerate api/gen from api/proto (offline; needs make tools)
	rm -rf api/gen
	buf generate

.PHONY: checkgenerate
checkgenerate: ## Fail when the committed generated code differs from a fresh generation
	@if ! command -v buf >/dev/null || ! command -v protoc-gen-go >/dev/null || ! command -v protoc-gen-grpc-gateway >/dev/null || ! command -v protoc-gen-go-vtproto >/dev/null; then \
		echo "generators not installed: skipping the generated-code check (make tools)"; exit 0; fi; \
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	buf generate -o $$tmp; \
	if ! diff -r api/gen $$tmp/api/gen >/dev/null; then \
		echo "api/gen is stale: run make generate and commit"; diff -r api/gen $$tmp/api/gen | head -20; exit 1; fi; \
	echo "generated code is up to date"
