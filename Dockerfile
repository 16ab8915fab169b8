# jobwire container image.
#
# Two stages: a Rust build stage (dependencies compiled in their own layer, so editing src/ does
# not rebuild them) and a slim Debian runtime with only the binary and CA certificates, run as a
# non-root user.
#
# The image has no redis-server: give it a Redis with JOBWIRE_REDIS_URL (or --redis-url), as the
# Helm chart always does. Without one, `jobwire serve` tries to start its embedded redis-server
# and exits with an error saying so.
#
# The image listens on every interface (0.0.0.0), and jobwire refuses a non-loopback gRPC
# address without an auth file unless --insecure is given. So `jobwire serve` needs one of:
#   --auth-file /etc/jobwire/auth.yaml   (mounted; tokens from `jobwire token new`), best with
#   --tls-cert/--tls-key (mounted too), or
#   --insecure                           (no authentication: every client may use every queue).
# The README's "Deploy with Helm" has both `docker run` lines; the chart passes them itself.
#
# No Docker engine runs in CI: .ci/run checks this file with hadolint and runs the build stage's
# steps from a clean copy of the tree (scripts/check-docker-build.sh).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src

# Dependencies: the manifest, lock file, build script and protos, with stub sources. This layer
# is rebuilt only when one of those files changes.
COPY Cargo.toml Cargo.lock build.rs ./
# jemalloc's settings (1 s decay, two arenas) are read when jemalloc itself is built.
COPY .cargo ./.cargo
COPY proto ./proto
# The Rust client SDK: a member of the Cargo workspace, and `jobwire bench` runs on it.
COPY clients/rust ./clients/rust
RUN mkdir -p src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src

# The real sources. `touch` makes them newer than the stubs' build outputs, whatever the
# modification times the build context carried.
COPY src ./src
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked

FROM debian:bookworm-slim AS runtime
# DL3008 (pin apt versions) is ignored in .hadolint.yaml: Debian replaces point-release versions,
# so pins break rebuilds; the base image tag fixes the release.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent jobwire
COPY --from=build /src/target/release/jobwire /usr/local/bin/jobwire
# Numeric, so Kubernetes can verify runAsNonRoot.
USER 10001:10001
WORKDIR /tmp
# The container's ports are its only way in: listen on every interface (see the bind rule above).
ENV JOBWIRE_GRPC_ADDR=0.0.0.0:50051 \
    JOBWIRE_HTTP_ADDR=0.0.0.0:9090
LABEL org.opencontainers.image.title="jobwire" \
      org.opencontainers.image.description="Language-agnostic gRPC job server backed by Redis" \
      org.opencontainers.image.licenses="Apache-2.0"
# gRPC (jobwire.v1, grpc.health.v1, reflection) and HTTP (/metrics, /healthz, /readyz).
EXPOSE 50051 9090
ENTRYPOINT ["jobwire"]
CMD ["serve"]
