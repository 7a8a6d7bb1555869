#!/usr/bin/env bash
# Real tools for the chart, monitoring, bundle and GitOps tests, in the user cache once per machine and version, like
# hack/controlplane.sh does for Kubernetes. Helm, the bundle validator and kstatus's verdict printer are built from
# Go modules (the wrapper modules under tests/tools/); promtool is taken from Debian's `prometheus` package (only the binary is unpacked,
# nothing is installed), which is good enough for checking and unit-testing alerting rules and saves building
# Prometheus from source (about 8 minutes on 2 cores). PROMTOOL=/path/to/promtool overrides it off Debian.
#
# The lint tool (hack/lint.sh): actionlint, built from its Go module like Helm, checks .github/workflows.
#
# The release's tools (hack/release.sh): zig (the C cross compiler and linker of the static binaries) and
# cargo-zigbuild, from their PyPI wheels (`ziglang`, `cargo-zigbuild`: prebuilt, unpacked, nothing installed);
# cargo-cyclonedx and cargo-auditable with `cargo install --locked` from crates.io (they have no prebuilt package;
# cargo-auditable embeds the dependency list in the released binaries, docs/release.md).
#
#   hack/tools.sh path TOOL                            build (or unpack) if needed, print the binary's path; TOOL is
#                                                      helm, promtool, bundle-validate, actionlint, kstatus, kueue,
#                                                      zig, cargo-zigbuild, cargo-cyclonedx or cargo-auditable
#   hack/tools.sh build [TOOL...]                      build if needed (by default the test and lint tools:
#                                                      helm, promtool, bundle-validate, kstatus, actionlint)
#   hack/tools.sh prometheus-crds                      print the directory holding prometheus-operator's CRDs
#   hack/tools.sh lws-crds                             print the directory holding LeaderWorkerSet's CRD
#   hack/tools.sh kueue-crds                           print the directory holding Kueue's CRDs
#   hack/tools.sh kueue-dir                            print Kueue's module directory (CRDs, webhook configurations)
#   hack/tools.sh path kueue                           build Kueue's manager if needed, print its path (about 12
#                                                      minutes of CPU cold; hack/test.sh builds it in the background)
#
# Each Go tool lives in ~/.cache/neuron-dra-operator/tools/<tool>/<version>/<tool>,
# next to a stamp (a hash of its wrapper module, the Go version and this recipe)
# and a lock, so parallel tests build it once.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${REPO_ROOT}/tests/tools"
CACHE_ROOT="${XDG_CACHE_HOME:-${HOME}/.cache}/neuron-dra-operator/tools"

# prometheus-operator ships the ServiceMonitor and PrometheusRule CRDs in its
# module zip; only these files are used (server-side dry runs of config/prometheus).
PROMETHEUS_OPERATOR_VERSION=v0.85.0
# LeaderWorkerSet ships its CRD in its module zip too (config/crd/bases); examples/leaderworkerset.yaml is checked
# against it with a server-side dry run.
LWS_VERSION=v0.7.0
# Kueue ships its CRDs (config/components/crd/bases, without conversion webhooks) and webhook configurations
# (config/components/webhook) in its module zip; the objects `render --kueue` prints are checked against them, and
# tests/kueue.rs runs its manager (built from the module's cmd/kueue, no wrapper module: the module's own go.sum is the
# whole graph) against the local control plane (docs/kueue.md). v0.19.3 and v0.18.0 are refused by the Go proxy.
KUEUE_VERSION=v0.19.2

# The release's tools. The versions are pinned here, the one place (a release built twice uses the same).
ZIG_VERSION=0.15.2
CARGO_ZIGBUILD_VERSION=0.24.1
CARGO_CYCLONEDX_VERSION=0.5.7
CARGO_AUDITABLE_VERSION=0.7.7

log() { echo "tools: $*" >&2; }
die() { log "$*"; exit 1; }

# tool_module TOOL: the module whose version names the cache directory.
tool_module() {
  case "$1" in
    helm) echo helm.sh/helm/v3 ;;
    bundle-validate) echo github.com/operator-framework/api ;;
    actionlint) echo github.com/rhysd/actionlint ;;
    kstatus) echo sigs.k8s.io/cli-utils ;;
    *) die "unknown tool '$1' (helm, promtool, bundle-validate, actionlint, kstatus, kueue, zig, cargo-zigbuild, cargo-cyclonedx, cargo-auditable)" ;;
  esac
}

# The version is read from the wrapper module's go.mod: its one source of truth.
tool_version() {
  local module
  module="$(tool_module "$1")"
  awk -v m="${module}" '($1 == "require" && $2 == m) { print $3 } ($1 == m) { print $2 }' \
    "${TOOLS_DIR}/$1/go.mod" | head -n1
}

# Everything that determines the binary; any change rebuilds.
build_stamp() {
  (
    cd "${TOOLS_DIR}/$1"
    cat go.mod go.sum ./*.go
    go env GOVERSION
    declare -f build_tool
  ) | sha256sum | cut -d' ' -f1
}

# build_tool TOOL VERSION OUT: the go build itself, as each project's own release build does it.
build_tool() {
  local tool="$1" version="$2" out="$3" pkg ldflags="-s -w" tags=""
  case "${tool}" in
    helm)
      pkg=helm.sh/helm/v3/cmd/helm
      # Helm's Makefile stamps its version and the Kubernetes version of its client
      # libraries (the default for .Capabilities.KubeVersion and the deprecation lint).
      local kube major minor
      kube="$(go list -m -f '{{.Version}}' k8s.io/client-go)"
      [[ "${kube}" =~ ^v0\.([0-9]+)\. ]] || die "cannot read the k8s.io/client-go version Helm uses"
      major=1 minor="${BASH_REMATCH[1]}"
      ldflags+=" -X helm.sh/helm/v3/internal/version.version=${version}"
      ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      local p
      for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        ldflags+=" -X ${p}.k8sVersionMajor=${major} -X ${p}.k8sVersionMinor=${minor}"
      done
      ;;
    bundle-validate | kstatus) pkg=. ;;
    actionlint)
      pkg=github.com/rhysd/actionlint/cmd/actionlint
      # actionlint's own release build stamps its version.
      ldflags+=" -X github.com/rhysd/actionlint.version=${version}"
      ;;
  esac
  # CGO off: static binaries, no C toolchain. GOWORK off and -mod=readonly: the
  # committed go.mod/go.sum are the whole module graph.
  env CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly go build -trimpath -tags "${tags}" -ldflags "${ldflags}" -o "${out}" "${pkg}"
}

# promtool from Debian's package: the candidate version apt knows (its lists are refreshed once if it knows none),
# downloaded and unpacked into the cache; prints the binary's path.
ensure_promtool() {
  if [[ -n "${PROMTOOL:-}" ]]; then
    [[ -x "${PROMTOOL}" ]] || die "PROMTOOL=${PROMTOOL} is not an executable"
    echo "${PROMTOOL}"
    return
  fi
  command -v apt-get >/dev/null || die "promtool comes from Debian's prometheus package; elsewhere set PROMTOOL=/path/to/promtool"
  local version
  version="$(apt-cache policy prometheus 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }')"
  if [[ -z "${version}" ]]; then
    log "refreshing apt's package lists to find Debian's prometheus package..."
    apt-get update -qq >&2 || die "apt-get update failed (root is needed to refresh the package lists)"
    version="$(apt-cache policy prometheus 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }')"
    [[ -n "${version}" ]] || die "apt knows no prometheus package; set PROMTOOL=/path/to/promtool"
  fi
  local dir="${CACHE_ROOT}/promtool/debian-${version}"
  mkdir -p "${dir}"
  exec 8>"${dir}/build.lock"
  flock 8
  if [[ ! -x "${dir}/promtool" ]]; then
    local work
    work="$(mktemp -d "${dir}/unpack.XXXXXX")"
    # apt-get download writes into the current directory; as root it warns that _apt cannot (harmless).
    (cd "${work}" && apt-get download -qq "prometheus=${version}" 2>/dev/null) ||
      die "apt-get download prometheus=${version} failed"
    dpkg-deb -x "${work}"/prometheus_*.deb "${work}/root"
    mv -f "${work}/root/usr/bin/promtool" "${dir}/promtool"
    rm -rf "${work}"
    log "unpacked promtool ${version} from Debian's prometheus package into ${dir}"
  fi
  exec 8>&-
  echo "${dir}/promtool"
}

# wheel_tool PACKAGE VERSION PATH: a tool from its PyPI wheel (a zip), unpacked into the cache (nothing is
# installed); prints the path of PATH inside the unpacked wheel.
wheel_tool() {
  local package="$1" version="$2" inside="$3" dir="${CACHE_ROOT}/$1/$2"
  mkdir -p "${dir}"
  exec 8>"${dir}/build.lock"
  flock 8
  if [[ ! -x "${dir}/wheel/${inside}" ]]; then
    local work
    work="$(mktemp -d "${dir}/unpack.XXXXXX")"
    log "downloading ${package} ${version} from PyPI (once per machine and version)..."
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
      --dest "${work}" "${package}==${version}" >&2 || die "pip download ${package}==${version} failed"
    python3 -m zipfile -e "${work}"/*.whl "${work}/wheel"
    chmod +x "${work}/wheel/${inside}"
    rm -rf "${dir}/wheel"
    mv "${work}/wheel" "${dir}/wheel"
    rm -rf "${work}"
  fi
  exec 8>&-
  echo "${dir}/wheel/${inside}"
}

# ensure_cargo_tool TOOL VERSION: `cargo install` into the cache; prints the binary's path.
ensure_cargo_tool() {
  local tool="$1" version="$2" dir="${CACHE_ROOT}/$1/$2"
  mkdir -p "${dir}"
  exec 8>"${dir}/build.lock"
  flock 8
  if [[ ! -x "${dir}/bin/${tool}" ]]; then
    local start=${SECONDS}
    log "building ${tool} ${version} (cargo install, once per machine and version)..."
    cargo install --quiet --locked --version "${version}" --root "${dir}" "${tool}" >&2 ||
      die "cargo install ${tool} ${version} failed"
    log "built ${tool} ${version} into ${dir} in $((SECONDS - start))s"
  fi
  exec 8>&-
  echo "${dir}/bin/${tool}"
}

# build_kueue OUT: Kueue's manager as its Makefile builds it (version stamped), static and without paths.
build_kueue() {
  local gobin
  gobin="$(mktemp -d "$(dirname "$1")/gobin.XXXXXX")"
  env CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly GOBIN="${gobin}" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}" \
    "sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION}"
  mv -f "${gobin}/kueue" "$1"
  rmdir "${gobin}"
}

# ensure_kueue: Kueue's manager in the cache (stamped like the Go tools); prints its path.
ensure_kueue() {
  command -v go >/dev/null || die "go is required to build kueue"
  local dir="${CACHE_ROOT}/kueue/${KUEUE_VERSION}" stamp
  mkdir -p "${dir}"
  exec 8>"${dir}/build.lock"
  flock 8
  stamp="$( (go env GOVERSION; declare -f build_kueue) | sha256sum | cut -d' ' -f1)"
  if [[ ! -x "${dir}/kueue" || "$(cat "${dir}/.stamp" 2>/dev/null)" != "${stamp}" ]]; then
    rm -f "${dir}/.stamp"
    local start=${SECONDS}
    log "building kueue ${KUEUE_VERSION} (once per machine and version; about 12 minutes of CPU cold)..."
    (cd "${REPO_ROOT}" && build_kueue "${dir}/kueue.tmp")
    mv -f "${dir}/kueue.tmp" "${dir}/kueue"
    echo "${stamp}" >"${dir}/.stamp"
    log "built kueue ${KUEUE_VERSION} into ${dir} in $((SECONDS - start))s"
  fi
  exec 8>&-
  echo "${dir}/kueue"
}

# ensure TOOL: builds TOOL unless the cached binary matches the stamp; prints its path.
ensure() {
  local tool="$1" version dir stamp
  case "${tool}" in
    promtool) ensure_promtool; return ;;
    zig) wheel_tool ziglang "${ZIG_VERSION}" ziglang/zig; return ;;
    cargo-zigbuild)
      wheel_tool cargo-zigbuild "${CARGO_ZIGBUILD_VERSION}" \
        "cargo_zigbuild-${CARGO_ZIGBUILD_VERSION}.data/scripts/cargo-zigbuild"
      return
      ;;
    cargo-cyclonedx) ensure_cargo_tool cargo-cyclonedx "${CARGO_CYCLONEDX_VERSION}"; return ;;
    cargo-auditable) ensure_cargo_tool cargo-auditable "${CARGO_AUDITABLE_VERSION}"; return ;;
    kueue) ensure_kueue; return ;;
  esac
  command -v go >/dev/null || die "go is required to build ${tool}"
  version="$(tool_version "${tool}")"
  [[ -n "${version}" ]] || die "cannot read the $(tool_module "${tool}") version from ${TOOLS_DIR}/${tool}/go.mod"
  dir="${CACHE_ROOT}/${tool}/${version}"
  mkdir -p "${dir}"
  exec 8>"${dir}/build.lock"
  flock 8
  stamp="$(build_stamp "${tool}")"
  if [[ ! -x "${dir}/${tool}" || "$(cat "${dir}/.stamp" 2>/dev/null)" != "${stamp}" ]]; then
    rm -f "${dir}/.stamp"
    local start=${SECONDS}
    log "building ${tool} ${version} (once per machine and version)..."
    (cd "${TOOLS_DIR}/${tool}" && build_tool "${tool}" "${version}" "${dir}/${tool}.tmp")
    mv -f "${dir}/${tool}.tmp" "${dir}/${tool}"
    echo "${stamp}" >"${dir}/.stamp"
    log "built ${tool} ${version} into ${dir} in $((SECONDS - start))s"
  fi
  exec 8>&-
  echo "${dir}/${tool}"
}

# module_dir MODULE@VERSION: the module's directory in the Go module cache, downloaded if needed.
module_dir() {
  (cd "${REPO_ROOT}" && GOWORK=off GOFLAGS='' go mod download -json "$1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
}

prometheus_crds() {
  local dir
  dir="$(module_dir "github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}")"
  [[ -d "${dir}/example/prometheus-operator-crd" ]] || die "no example/prometheus-operator-crd in ${dir}"
  echo "${dir}/example/prometheus-operator-crd"
}

lws_crds() {
  local dir
  dir="$(module_dir "sigs.k8s.io/lws@${LWS_VERSION}")"
  [[ -d "${dir}/config/crd/bases" ]] || die "no config/crd/bases in ${dir}"
  echo "${dir}/config/crd/bases"
}

kueue_crds() {
  local dir
  dir="$(module_dir "sigs.k8s.io/kueue@${KUEUE_VERSION}")"
  [[ -d "${dir}/config/components/crd/bases" ]] || die "no config/components/crd/bases in ${dir}"
  echo "${dir}/config/components/crd/bases"
}

main() {
  case "${1:-}" in
    path) [[ $# -eq 2 ]] || die "usage: $0 path TOOL"; ensure "$2" ;;
    build)
      shift
      local -a tools=("$@")
      ((${#tools[@]})) || tools=(helm promtool bundle-validate kstatus actionlint)
      local tool
      for tool in "${tools[@]}"; do ensure "${tool}" >/dev/null; done
      ;;
    prometheus-crds) prometheus_crds ;;
    lws-crds) lws_crds ;;
    kueue-crds) kueue_crds ;;
    kueue-dir) module_dir "sigs.k8s.io/kueue@${KUEUE_VERSION}" ;;
    kueue-version) echo "${KUEUE_VERSION}" ;;
    *) echo "usage: $0 path TOOL | build [TOOL...] | prometheus-crds | lws-crds | kueue-crds | kueue-dir | kueue-version" >&2; exit 2 ;;
  esac
}

main "$@"; exit
