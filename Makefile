# idempotent-consumer-operator: developer and CI entry points.
# `make help` lists the targets. Everything runs offline once the Go module
# cache is warm; the envtest control plane is built from source once and cached
# in the user's cache directory (see hack/envtest.sh).

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

IMG ?= ghcr.io/idempotency-dev/operator:latest
CONSUMER_IMG ?= ghcr.io/idempotency-dev/consumer:latest
CONTROLLER_GEN ?= go tool controller-gen
GO_TEST_FLAGS ?= -count=1 -timeout=30m
# Generated files, checked for staleness by verify-generated.
GENERATED := api config/crd config/rbac

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate the CRD and RBAC manifests from the API types and markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/..." paths="./controllers/..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: api-docs
api-docs: ## Regenerate docs/api-reference.md from the API types (a test fails when it is stale).
	go run ./hack/apidocs > docs/api-reference.md

.PHONY: verify-generated
verify-generated: ## Fail if generated code or manifests are stale (they are regenerated in place).
	@before="$$(find $(GENERATED) -type f 2>/dev/null | sort | xargs -r sha256sum)"; \
	$(MAKE) --no-print-directory manifests generate >/dev/null; \
	after="$$(find $(GENERATED) -type f 2>/dev/null | sort | xargs -r sha256sum)"; \
	if [[ "$$before" != "$$after" ]]; then \
		diff <(echo "$$before") <(echo "$$after") || true; \
		echo "verify-generated: generated files were stale; they have been regenerated: review and commit them" >&2; \
		exit 1; \
	fi; \
	if [[ -n "$${CI:-}" ]] && ! git diff --quiet -- $(GENERATED); then \
		git --no-pager diff --stat -- $(GENERATED); \
		echo "verify-generated: committed generated files differ from what 'make manifests generate' produces" >&2; \
		exit 1; \
	fi

.PHONY: fmt
fmt: ## Run gofmt on the module (fails in CI if files need formatting; third_party/ is upstream code, left as is).
	@out="$$(gofmt -l $$(git ls-files '*.go' ':!:third_party/' 2>/dev/null || find . -name '*.go' -not -path './third_party/*'))"; \
	if [[ -n "$$out" ]]; then \
		if [[ -n "$${CI:-}" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi; \
		gofmt -w $$out; \
	fi

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: ## Run golangci-lint (pinned in hack/tools; built on first use, skipped if it cannot be built).
	@bin="$$(hack/tool.sh golangci-lint)" || { echo "lint: golangci-lint unavailable; skipped" >&2; exit 0; }; \
	"$$bin" run ./...

.PHONY: envtest
envtest: ## Build (once) and print the envtest control plane directory (kube-apiserver, etcd, kubectl).
	@hack/envtest.sh

.PHONY: test
test: fmt vet verify-generated ## Run all tests: unit, PostgreSQL, Kafka and envtest integration, e2e.
	@assets="$$(hack/envtest.sh)"; \
	echo "test: KUBEBUILDER_ASSETS=$$assets"; \
	KUBEBUILDER_ASSETS="$$assets" go test $(GO_TEST_FLAGS) -race ./consumer/...; \
	KUBEBUILDER_ASSETS="$$assets" go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v '^github.com/idempotency-dev/operator/consumer'); \
	cd third_party/kafka-go && go test $(GO_TEST_FLAGS) -race -run 'TestReadCommitted' . # the patch's tests (PATCH.md)

.PHONY: bench
bench: ## Run the benchmarks; each prints ratios against a baseline measured in the same run.
	hack/bench.sh

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 60s) each.
	hack/fuzz.sh

.PHONY: chaos
chaos: ## Chaos run: 100k events, kill -9s, rebalances, PostgreSQL and broker restarts; checks exactly-once.
	@go build -o bin/chaos ./hack/chaos
	bin/chaos $(CHAOS_FLAGS)

.PHONY: demo
demo: ## Run the whole system locally (control plane, PostgreSQL, broker, operator, consumers) and report.
	@go build -o bin/demo ./hack/demo
	bin/demo $(DEMO_FLAGS)

##@ Build

.PHONY: build
build: ## Build the manager, consumer and devbroker binaries into bin/.
	CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/...

.PHONY: run
run: manifests generate ## Run the operator against the current kubeconfig.
	go run ./cmd/manager

.PHONY: docker-build
docker-build: ## Build the operator and consumer images (needs a Docker engine).
	docker build --target manager -t $(IMG) .
	docker build --target consumer -t $(CONSUMER_IMG) .

##@ Deployment

.PHONY: build-installer
build-installer: manifests ## Render config/default into dist/install.yaml.
	mkdir -p dist
	go run ./hack/kustomize build config/default > dist/install.yaml
