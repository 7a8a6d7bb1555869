# syntax=docker/dockerfile:1
# The operator image: a release build on distroless/cc (glibc, CA certificates, no shell), running as the
# distroless `nonroot` user 65532 that config/manager's Deployment also names. Build it with `make image`, which
# tags it with the reference in config/manager/kustomization.yaml.
#
# The binary comes from one of two stages, chosen by BINARY: `source` (the default: a release build from the
# sources, what `make image` and a release run) or `prebuilt` (a binary already built on the host and placed in the
# build context, for builders that cannot pull the Rust image: hack/images.sh builds the local node's operator
# image that way). Only the chosen stage is built.
ARG BINARY=source

FROM docker.io/library/rust:1.95-bookworm AS source
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --release --bin neuron-dra-operator \
    && cp target/release/neuron-dra-operator /neuron-dra-operator

FROM scratch AS prebuilt
COPY neuron-dra-operator /neuron-dra-operator

FROM ${BINARY} AS binary

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=binary /neuron-dra-operator /neuron-dra-operator
USER 65532:65532
ENTRYPOINT ["/neuron-dra-operator"]
CMD ["run"]
