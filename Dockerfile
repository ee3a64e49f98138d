# Build stage: compile the release binary.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY config ./config
COPY migrations ./migrations
COPY benches ./benches
RUN cargo build --release --locked

# Runtime stage: just the binary, run as an unprivileged user.
FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --no-create-home dapi
COPY --from=build /src/target/release/dapi /usr/local/bin/dapi
USER dapi
# Inside a container the service must listen beyond loopback; publish the port deliberately.
ENV DAPI_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/dapi"]
CMD ["serve"]
