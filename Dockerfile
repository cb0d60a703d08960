# syntax=docker/dockerfile:1
# Multi-stage build: a static binary (the musl target, OpenSSL built from source: the `static`
# feature), its dependencies compiled in their own cached layer (only Cargo.toml and Cargo.lock
# invalidate it); the runtime is Debian slim with CA certificates and curl (for the
# HEALTHCHECK on /healthz), running as a non-root user. README "Release builds".
FROM rust:1.88-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake musl-tools perl pkg-config \
    && rm -rf /var/lib/apt/lists/* && rustup target add x86_64-unknown-linux-musl
ENV CC_x86_64_unknown_linux_musl=musl-gcc
ARG TARGET=x86_64-unknown-linux-musl
WORKDIR /src
# The build_info metric's git_sha (the build context has no .git): docker build --build-arg MKB_GIT_SHA=$(git rev-parse --short=12 HEAD) .
ARG MKB_GIT_SHA=unknown
ENV MKB_GIT_SHA=$MKB_GIT_SHA
COPY Cargo.toml Cargo.lock build.rs ./
# Stub every target the manifest names, so that the dependency layer builds without the sources.
RUN mkdir -p src bench/criterion bench/src bench/rules \
    && echo 'fn main() {}' > src/main.rs && echo '' > src/lib.rs \
    && echo 'fn main() {}' > bench/criterion/encode.rs && echo 'fn main() {}' > bench/src/main.rs \
    && echo 'fn main() {}' > bench/rules/main.rs \
    && cargo build --release --locked --target $TARGET --features static --bin mongo-kafka-bridge \
    && rm -rf src
COPY src ./src
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --target $TARGET --features static --bin mongo-kafka-bridge \
    && strip target/$TARGET/release/mongo-kafka-bridge

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 bridge
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/mongo-kafka-bridge /usr/local/bin/mongo-kafka-bridge
USER 10001
ENV MONGO_KAFKA_BRIDGE__METRICS__LISTEN=0.0.0.0:9464
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD curl -fsS http://127.0.0.1:9464/healthz || exit 1
ENTRYPOINT ["mongo-kafka-bridge"]
CMD ["run", "--config", "/etc/mongo-kafka-bridge/config.toml", "--no-status"]
