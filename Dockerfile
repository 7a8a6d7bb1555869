# syntax=docker/dockerfile:1
# The operator image: a release build on distroless/cc (glibc, CA certificates, no shell), running as the
# distroless `nonroot` user 65532 that config/manager's Deployment also names. Build it with `make image`, which
# tags it with the reference in config/manager/kustomization.yaml.
FROM docker.io/library/rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --release --bin neuron-dra-operator \
    && cp target/release/neuron-dra-operator /neuron-dra-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /neuron-dra-operator /neuron-dra-operator
USER 65532:65532
ENTRYPOINT ["/neuron-dra-operator"]
CMD ["run"]
