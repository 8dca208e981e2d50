# stock-app and loadtest, for docker-compose.yml.
#
# Stage 1 builds both binaries with the Rust toolchain this repository is tested with.
# No database is needed at build time: the queries are checked at run time (and
# .cargo/config.toml sets SQLX_OFFLINE=true should a compile-time `query!` ever land).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin stock-app --bin loadtest \
 && cp target/release/stock-app target/release/loadtest /usr/local/bin/

# Stage 2: a small runtime image holding both binaries. The load tester's HTML charts
# need a font (DejaVu); curl is for the health checks.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl fonts-dejavu-core \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/stock-app /usr/local/bin/loadtest /usr/local/bin/
# The service listens on all interfaces inside its container (compose publishes it).
ENV BIND=0.0.0.0:8080
EXPOSE 8080
CMD ["stock-app"]
