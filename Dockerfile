# syntax=docker/dockerfile:1
# The operator image: one static binary (Rust, musl libc linked in) on an empty base, running as the non-root user
# 65532 that config/manager's Deployment also names. No shell, no libc, no CA bundle: the operator talks only to the
# API server, whose CA comes with its ServiceAccount token. `make image` builds it with Docker from the sources;
# `make release` builds it for linux/amd64 and linux/arm64 with buildah (docs/release.md).
#
# The binary comes from one of two stages, chosen by BINARY: `source` (the default: a release build from the
# sources in the Rust image, with cargo-auditable) or `prebuilt` (a static binary already built on the host and
# placed in the build context as `neuron-dra-operator`, with `LICENSE` and `THIRD-PARTY-NOTICES` beside it: how
# `make release` and the local node's image, hack/images.sh, build it without pulling anything). Only the chosen
# stage is built. Either way the image carries /licenses/LICENSE (the project's) and /licenses/THIRD-PARTY-NOTICES
# (every crate in the binary with its licence texts, hack/notices.py from `cargo metadata`).
ARG BINARY=source

FROM docker.io/library/rust:1.95-bookworm AS source
# musl-gcc compiles the C and assembly of the TLS library (ring) for the static target.
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The commit, for the binary's build_info metric and --version (`make image` passes it).
ARG REVISION=unknown
# cargo-auditable embeds the dependency list in the binary (its `.dep-v0` section), for scanners (docs/release.md);
# its version is hack/tools.sh's.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
    && rustup target add "${target}" \
    && cargo install --locked --version "$(awk -F= '$1 == "CARGO_AUDITABLE_VERSION" { print $2 }' hack/tools.sh)" cargo-auditable \
    && NEURON_DRA_OPERATOR_REVISION="${REVISION}" cargo auditable build --locked --release --target "${target}" --bin neuron-dra-operator \
    && mkdir /licenses && cp LICENSE /licenses/LICENSE && python3 hack/notices.py "${target}" /licenses/THIRD-PARTY-NOTICES \
    && cp "target/${target}/release/neuron-dra-operator" /neuron-dra-operator

FROM scratch AS prebuilt
COPY neuron-dra-operator /neuron-dra-operator
COPY LICENSE THIRD-PARTY-NOTICES /licenses/

FROM ${BINARY} AS binary

FROM scratch
# What the image is, for registries and scanners (OCI image spec, "Pre-Defined Annotation Keys").
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="neuron-dra-operator" \
      org.opencontainers.image.description="Runs AWS Neuron DRA on Trainium from one NeuronDRAConfig" \
      org.opencontainers.image.source="https://github.com/neurondra/neuron-dra-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=binary /neuron-dra-operator /neuron-dra-operator
COPY --from=binary /licenses /licenses
USER 65532:65532
ENTRYPOINT ["/neuron-dra-operator"]
CMD ["run"]
