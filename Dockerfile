# syntax=docker/dockerfile:1
#
# agentd container image: a static, CGO-free binary on distroless "static"
# running as a non-root user (uid/gid 65532, "nonroot").
#
#   docker build -t agentd:dev .
#   docker run --rm -p 9090:9090 -p 8080:8080 \
#     -v "$PWD/agentd.yaml:/etc/agentd/config.yaml:ro" agentd:dev
#
# The image needs a config file that listens on 0.0.0.0 (and therefore sets
# auth.tokens): deploy/kubernetes/configmap.yaml is a complete example.
# Checked statically by deploy/deploy_test.go; see deploy/README.md.

ARG GO_VERSION=1.26

# ---- build stage -----------------------------------------------------------
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src

# Modules first, so the download layer is cached across source changes.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .
# Set by BuildKit/buildx for cross builds (empty means the build platform).
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/agentd ./cmd/agentd

# ---- runtime stage ---------------------------------------------------------
# distroless static: CA certificates, tzdata, /etc/passwd with "nonroot"; no
# shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/agentd /usr/local/bin/agentd
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# gRPC, then HTTP (REST gateway, SSE, /metrics, /healthz, /readyz).
EXPOSE 9090 8080
ENTRYPOINT ["/usr/local/bin/agentd", "serve"]
CMD ["--config", "/etc/agentd/config.yaml", "--log-format", "json"]
