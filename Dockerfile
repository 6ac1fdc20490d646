# syntax=docker/dockerfile:1
# Two images from one build: the operator (target "manager") and the ready-made
# consumer (target "consumer"). Static binaries on a distroless, non-root base.
# `make docker-build` / `make docker-buildx` pass VERSION and REVISION, which
# are stamped into the binaries (--version, the *_build_info metrics):
#   docker build --target manager  --build-arg VERSION=v0.1.0 -t ghcr.io/idempotency-dev/operator:v0.1.0 .
#   docker build --target consumer --build-arg VERSION=v0.1.0 -t ghcr.io/idempotency-dev/consumer:v0.1.0 .
# The builder runs on the build machine's platform and cross-compiles, so a
# multi-arch build emulates nothing.
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=
WORKDIR /workspace
COPY go.mod go.sum ./
# go.mod replaces segmentio/kafka-go and twmb/franz-go/pkg/kfake with the patched copies in third_party/.
COPY third_party/ third_party/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY consumer/ consumer/
COPY controllers/ controllers/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w -X github.com/idempotency-dev/operator/consumer/version.version=${VERSION} -X github.com/idempotency-dev/operator/consumer/version.revision=${REVISION}" -o /out/ ./cmd/manager ./cmd/consumer ./cmd/dedup-migrate ./cmd/dedupctl

FROM gcr.io/distroless/static:nonroot AS consumer
WORKDIR /
COPY --from=builder /out/consumer /consumer
# The migration tool for legacy processed_event tables (docs/migration.md) rides along.
COPY --from=builder /out/dedup-migrate /dedup-migrate
# dedupctl keeps a table where no operator runs (docs/dedupctl.md): a CronJob
# or a sidecar of this image runs `/dedupctl maintain --every 1h`.
COPY --from=builder /out/dedupctl /dedupctl
USER 65532:65532
ENTRYPOINT ["/consumer"]

FROM gcr.io/distroless/static:nonroot AS manager
WORKDIR /
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
