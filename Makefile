# idempotent-consumer-operator: developer and CI entry points.
# `make help` lists the targets. Everything runs offline once the Go module
# cache is warm; the envtest control plane is built from source once and cached
# in the user's cache directory (see hack/envtest.sh).

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

# The version stamped into both binaries and used as both images' tag:
# `git describe` of the checkout (a release tag such as v0.1.0 on a tagged
# commit), else "dev". Override it: make build-installer VERSION=v0.1.0.
ifeq ($(origin VERSION), undefined)
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
endif
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
REGISTRY ?= ghcr.io/idempotency-dev
IMG ?= $(REGISTRY)/operator:$(VERSION)
CONSUMER_IMG ?= $(REGISTRY)/consumer:$(VERSION)
# Platforms of the multi-arch images (docker-buildx).
PLATFORMS ?= linux/amd64,linux/arm64
# Where build puts the binaries (and which), where build-installer writes.
BIN ?= bin
CMDS ?= ./cmd/...
DIST ?= dist
VERSION_PKG := github.com/idempotency-dev/operator/consumer/version
LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)
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

.PHONY: verify-tidy
verify-tidy: ## Fail if go.mod or go.sum is not what `go mod tidy` makes of them.
	@go mod tidy -diff || { echo "verify-tidy: run 'go mod tidy' and commit go.mod and go.sum" >&2; exit 1; }

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
lint: ## Run golangci-lint (pinned in hack/tools, .golangci.yml; built on first use; if it cannot be built: skipped, but fails under CI=true).
	@bin="$$(hack/tool.sh golangci-lint)" || { \
		if [[ -n "$${CI:-}" ]]; then echo "lint: golangci-lint could not be built (is the Go module proxy reachable?)" >&2; exit 1; fi; \
		echo "lint: golangci-lint unavailable; skipped" >&2; exit 0; }; \
	"$$bin" run ./...

.PHONY: envtest
envtest: ## Build (once) and print the envtest control plane directory (kube-apiserver, etcd, kubectl).
	@hack/envtest.sh

.PHONY: lint-workflows
lint-workflows: ## Lint .github/workflows with actionlint (pinned in hack/tools/actionlint; fails if it can't be built).
	@bin="$$(hack/tool.sh actionlint)" || { echo "lint-workflows: actionlint could not be built (is the Go module cache warm?)" >&2; exit 1; }; \
	"$$bin" -shellcheck= -pyflakes= -no-color .github/workflows/*.yml && echo "lint-workflows: $$(ls .github/workflows/*.yml | wc -l) workflow(s) pass actionlint"

.PHONY: test-docs
test-docs: ## Run the docs as tests: getting-started.md and README.md's example on a local stack, and the docs' tables against the code (part of make test).
	@assets="$$(hack/envtest.sh)"; \
	KUBEBUILDER_ASSETS="$$assets" go test $(GO_TEST_FLAGS) -run 'TestGettingStartedRuns' ./hack/demo/ && \
	go test $(GO_TEST_FLAGS) ./hack/docscheck/ && \
	go test $(GO_TEST_FLAGS) -run 'TestMetricsTableMatchesTheCode' ./consumer/

.PHONY: test
test: fmt vet verify-tidy verify-generated lint lint-workflows ## Run all tests: unit, PostgreSQL, Kafka and envtest integration, e2e.
	@assets="$$(hack/envtest.sh)"; \
	echo "test: KUBEBUILDER_ASSETS=$$assets"; \
	KUBEBUILDER_ASSETS="$$assets" go test $(GO_TEST_FLAGS) -race ./consumer/...; \
	KUBEBUILDER_ASSETS="$$assets" go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e '^github.com/idempotency-dev/operator/consumer' -e '^github.com/idempotency-dev/operator/examples/' -e '^github.com/idempotency-dev/operator/hack/upgrade$$'); \
	cd third_party/kafka-go && go test $(GO_TEST_FLAGS) -race -run 'TestReadCommitted|TestDrainTimeout' . # the patch's tests (PATCH.md)
	@$(MAKE) --no-print-directory test-examples
	@$(MAKE) --no-print-directory test-upgrade

.PHONY: test-upgrade
test-upgrade: ## Upgrade and downgrade from a real older build (latest tag, else af2c676) under traffic; prints RESULT upgrade ...
	@assets="$$(hack/envtest.sh)"; \
	KUBEBUILDER_ASSETS="$$assets" go test $(GO_TEST_FLAGS) -v -run '^TestUpgradeFromOlderBuild$$' ./hack/upgrade/

.PHONY: test-examples
test-examples: ## Run the examples in examples/ against PostgreSQL and the broker (needs Node.js 20 and npm, npm ci from the lock files; python3-confluent-kafka and python3-psycopg).
	go test $(GO_TEST_FLAGS) ./examples/...

.PHONY: bench
bench: ## Run the benchmarks; each prints ratios against a baseline measured in the same run.
	hack/bench.sh

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 60s) each.
	hack/fuzz.sh

.PHONY: chaos
chaos: ## Chaos run: 100k events, SQL and HTTP sinks, kill -9s, rebalances, PostgreSQL and broker restarts; checks exactly-once; then the outbox chain.
	@go build -o bin/chaos ./hack/chaos
	bin/chaos $(CHAOS_FLAGS)

.PHONY: demo
demo: ## Run the whole system locally (control plane, PostgreSQL, broker, operator, consumers) and report.
	@go build -o bin/demo ./hack/demo
	bin/demo $(DEMO_FLAGS)

##@ Build

.PHONY: build
build: ## Build every binary into bin/, stamped with VERSION (bin/manager --version).
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ $(CMDS)

.PHONY: run
run: manifests generate ## Run the operator against the current kubeconfig.
	go run -ldflags "$(LDFLAGS)" ./cmd/manager --consumer-image=$(CONSUMER_IMG)

.PHONY: docker-build
docker-build: ## Build the operator and consumer images for this machine (IMG, CONSUMER_IMG; needs Docker).
	docker build --target manager --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMG) .
	docker build --target consumer --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(CONSUMER_IMG) .

.PHONY: docker-push
docker-push: ## Push IMG and CONSUMER_IMG (built by docker-build).
	docker push $(IMG)
	docker push $(CONSUMER_IMG)

.PHONY: docker-buildx
docker-buildx: ## Build and push multi-arch images (PLATFORMS) of IMG and CONSUMER_IMG with docker buildx.
	docker buildx build --push --platform=$(PLATFORMS) --target manager --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMG) .
	docker buildx build --push --platform=$(PLATFORMS) --target consumer --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(CONSUMER_IMG) .

##@ Deployment

.PHONY: build-installer
build-installer: manifests ## Render dist/crds.yaml and dist/install.yaml (the operator, every image tagged VERSION).
	mkdir -p $(DIST)
	go run ./hack/kustomize build config/crd > $(DIST)/crds.yaml.tmp
	mv $(DIST)/crds.yaml.tmp $(DIST)/crds.yaml
	go run ./hack/kustomize installer -image $(IMG) -consumer-image $(CONSUMER_IMG) config/default > $(DIST)/install.yaml.tmp
	mv $(DIST)/install.yaml.tmp $(DIST)/install.yaml
	@echo "build-installer: $(DIST)/crds.yaml, $(DIST)/install.yaml (operator $(IMG), consumer $(CONSUMER_IMG))"

# kubectl, resolved when a target runs: KUBECTL, else kubectl on PATH, else
# the one hack/envtest.sh builds from source (once, cached).
kubectl = $${KUBECTL:-$$(command -v kubectl || echo "$$(hack/envtest.sh)/kubectl")}

.PHONY: install
install: manifests ## Install (or update) the CRD in the current kubeconfig's cluster.
	go run ./hack/kustomize build config/crd | $(kubectl) apply --server-side -f -

.PHONY: uninstall
uninstall: ## Remove the CRD; refuses while any IdempotentConsumer exists (removing it deletes them all).
	@k=$(kubectl); \
	if ! out="$$($$k get crd idempotentconsumers.kafka.idempotency.dev -o name 2>&1)"; then \
		if [[ "$$out" == *NotFound* ]]; then echo "uninstall: the CRD is not installed"; exit 0; fi; \
		echo "uninstall: refusing: cannot read the CRD: $$out" >&2; exit 1; \
	fi; \
	errf="$$(mktemp)"; trap 'rm -f "$$errf"' EXIT; \
	if ! left="$$($$k get idempotentconsumers.kafka.idempotency.dev --all-namespaces --no-headers -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name 2>"$$errf")"; then \
		echo "uninstall: refusing: cannot list IdempotentConsumers, so cannot tell whether removing the CRD would delete some:" >&2; \
		cat "$$errf" >&2; \
		exit 1; \
	fi; \
	if [[ -n "$$left" ]]; then \
		echo "uninstall: refusing: these IdempotentConsumers still exist, and removing the CRD would delete them (and their consumer Deployments):" >&2; \
		echo "$$left" >&2; \
		echo "uninstall: delete them first, while the operator runs (docs/getting-started.md, Uninstall)" >&2; \
		exit 1; \
	fi; \
	go run ./hack/kustomize build config/crd | $$k delete --ignore-not-found -f -

.PHONY: deploy
deploy: ## Deploy the operator (IMG, CONSUMER_IMG) to the current kubeconfig's cluster; install the CRD first.
	go run ./hack/kustomize installer -image $(IMG) -consumer-image $(CONSUMER_IMG) config/default | $(kubectl) apply -f -

.PHONY: undeploy
undeploy: ## Remove the operator; leaves the CRD, every IdempotentConsumer and their consumers in place.
	go run ./hack/kustomize build config/default | $(kubectl) delete --ignore-not-found -f -
