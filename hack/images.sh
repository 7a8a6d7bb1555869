#!/usr/bin/env bash
# Container images for the local node (hack/node.sh), built here and never pulled: nothing on this machine can reach
# an image registry. Each image is a recipe under images/ (a Containerfile) plus a build context that this script
# stages; buildah builds it with --pull=never into a storage of its own in the user cache, and the result is kept as
# an OCI archive named after the hash of everything that went in, so an unchanged image is never built twice.
#
#   hack/images.sh build [NAME...]                  build what changed (every image by default)
#   hack/images.sh import CTR SOCK [NAME...]        import the images into a containerd's k8s.io namespace
#   hack/images.sh ref NAME                         print the image reference (what a pod spec names)
#   hack/images.sh archive NAME                     build if needed, print the OCI archive's path
#   hack/images.sh list                             the images and their references
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/neuron-dra-operator/images"

# The images, in build order (an image may start FROM an earlier one): NAME REFERENCE RECIPE STAGE [ARGS...].
# RECIPE is the directory holding the Containerfile (or Dockerfile); STAGE fills the build context:
#   stage_recipe                  the recipe directory itself
#   stage_files FILE...           the recipe directory plus FILEs (paths relative to the repository), e.g. a binary
#                                 cargo has built: "operator example.com/neuron-dra-operator:dev images/operator
#                                 stage_files target/release/neuron-dra-operator"
#   stage_pause / stage_busybox   below
# The operator's reference is the one config/manager/kustomization.yaml names, read from there, so the chart and
# `kubectl apply -k config/default` run it unchanged.
OPERATOR_REF="$("${REPO_ROOT}/hack/release.sh" ref operator)"
IMAGES=(
  "pause localhost/neuron-dra/pause:1 images/pause stage_pause"
  "busybox localhost/neuron-dra/busybox:1.35.0 images/busybox stage_busybox"
  "operator ${OPERATOR_REF} . stage_operator"
  "neuron-plugin localhost/neuron-dra/neuron-dra-driver:1.1.0 images/neuron-plugin stage_neuron_plugin"
  "neuron-plugin-next localhost/neuron-dra/neuron-dra-driver:1.2.0 images/neuron-plugin stage_neuron_plugin"
  "neuron-plugin-notready localhost/neuron-dra/neuron-dra-driver:1.1.0-notready images/neuron-plugin stage_neuron_plugin"
  "neuron-plugin-fewer localhost/neuron-dra/neuron-dra-driver:1.1.0-fewer images/neuron-plugin stage_neuron_plugin"
)

log() { echo "images: $*" >&2; }
die() { log "$*"; exit 1; }

# entry NAME: sets NAME REF RECIPE STAGE STAGE_ARGS from the table.
entry() {
  local e
  for e in "${IMAGES[@]}"; do
    read -r NAME REF RECIPE STAGE STAGE_ARGS <<<"${e}"
    [[ "${NAME}" != "$1" ]] || return 0
  done
  die "unknown image '$1' ($(names | tr '\n' ' '))"
}

names() {
  local e
  for e in "${IMAGES[@]}"; do echo "${e%% *}"; done
}

# ---------------------------------------------------------------------------
# build contexts: each stage function fills $1, an empty directory
# ---------------------------------------------------------------------------

stage_recipe() { cp -a "${REPO_ROOT}/${RECIPE}/." "$1/"; }

stage_files() {
  local ctx="$1" f; shift
  stage_recipe "${ctx}"
  for f in "$@"; do
    [[ -e "${REPO_ROOT}/${f}" ]] || die "${NAME}: ${f} does not exist (build it first)"
    cp -a "${REPO_ROOT}/${f}" "${ctx}/"
  done
}

# The pause binary, static, from images/pause (a module with no dependencies).
stage_pause() {
  stage_recipe "$1"
  (cd "${REPO_ROOT}/${RECIPE}" && env CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
    go build -trimpath -ldflags "-s -w" -o "$1/pause" .)
  rm -f "$1/go.mod" "$1/main.go"
}

# Debian's static busybox and a symlink per applet, from the package's own applet list.
stage_busybox() {
  local busybox=/bin/busybox applet
  [[ -x "${busybox}" ]] && ! ldd "${busybox}" >/dev/null 2>&1 ||
    die "needs a static busybox: apt-get install -y busybox-static"
  stage_recipe "$1"
  mkdir -p "$1/bin"
  cp "${busybox}" "$1/bin/busybox"
  for applet in $("${busybox}" --list); do
    [[ "${applet}" == busybox ]] || ln -s busybox "$1/bin/${applet}"
  done
}

# The stand-in Neuron kubelet plugin (docs/standin-plugin.md): its static binary from images/neuron-plugin (a module
# pinned to the kubelet's k8s.io release, so it shares the kubelet's Go build cache), the devices the simulator
# publishes per Trainium type from `neuron-dra-devtools simulate devices` (the one model, in Rust), and the tag of
# the image being built (a tag ending in -notready or -fewer changes what the plugin does).
stage_neuron_plugin() {
  local ctx="$1" devtools="${REPO_ROOT}/target/debug/neuron-dra-devtools"
  mkdir -p "${ctx}"
  cp "${REPO_ROOT}/${RECIPE}/Containerfile" "${ctx}/"
  (cd "${REPO_ROOT}/${RECIPE}" && env CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
    go build -trimpath -ldflags "-s -w" -o "${ctx}/k8s-neuron-dra-driver" .)
  (cd "${REPO_ROOT}" && cargo build --locked --quiet --features devtools --bin neuron-dra-devtools)
  "${devtools}" simulate devices >"${ctx}/devices.json"
  echo "${REF##*:}" >"${ctx}/tag"
}

# The operator image from the repository's own Dockerfile, through its `prebuilt` stage: the static binary that
# `make release-check` also checks, with the licences (hack/release.sh context: a musl build for this machine's
# architecture, without the optimisation of a release, which would cost minutes for nothing the tests see). A
# context file `build-args` holds the Dockerfile's build arguments, one NAME=VALUE per line.
stage_operator() {
  local ctx="$1"
  "${REPO_ROOT}/hack/release.sh" context "$(uname -m)" release-check "${ctx}"
  printf '%s\n' BINARY=prebuilt VERSION="${OPERATOR_REF##*:}" >"${ctx}/build-args"
}

# ---------------------------------------------------------------------------
# build / import
# ---------------------------------------------------------------------------

buildah_() {
  command -v buildah >/dev/null || die "needs buildah: apt-get install -y buildah"
  # vfs: plain directories, so nothing stays mounted; the images are small.
  buildah --root "${CACHE_DIR}/storage" --runroot "${CACHE_DIR}/run" --storage-driver vfs "$@"
}

# Hash of the staged context (names, modes, link targets and contents) and of this script's build recipe.
context_hash() {
  (
    cd "$1"
    find . -printf '%p %m %l\n' | LC_ALL=C sort
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum
    echo "${REF}"
    declare -f build_one buildah_
  ) | sha256sum | cut -c1-16
}

# build_one NAME: prints the archive's path after building it unless an archive of the same inputs exists.
build_one() {
  entry "$1"
  mkdir -p "${CACHE_DIR}/archives"
  local ctx
  ctx="$(mktemp -d "${CACHE_DIR}/context.XXXXXX")"
  # shellcheck disable=SC2086 # STAGE_ARGS is a word list
  "${STAGE}" "${ctx}" ${STAGE_ARGS}
  local hash archive file f
  hash="$(context_hash "${ctx}")"
  archive="${CACHE_DIR}/archives/${NAME}-${hash}.tar"
  # Built once per content hash; built again when buildah's storage lost it, as a later image may start FROM it.
  if [[ ! -f "${archive}" ]] || ! buildah_ inspect --type image "${REF}" >/dev/null 2>&1; then
    file=""
    for f in Dockerfile Containerfile; do [[ ! -f "${ctx}/${f}" ]] || file="${f}"; done
    [[ -n "${file}" ]] || die "${NAME}: no Containerfile or Dockerfile in ${RECIPE}"
    local build_args=() arg
    if [[ -f "${ctx}/build-args" ]]; then
      while read -r arg; do build_args+=(--build-arg "${arg}"); done <"${ctx}/build-args"
    fi
    log "building ${NAME} (${REF})"
    # --timestamp 0 and no history: the same inputs give the same image digest. --pull=never: FROM names an
    # image built earlier into this storage (or scratch), never a registry.
    buildah_ bud --quiet --pull=never --layers=false --timestamp 0 --omit-history \
      "${build_args[@]}" -f "${ctx}/${file}" -t "${REF}" "${ctx}" >/dev/null
    buildah_ push --quiet "${REF}" "oci-archive:${archive}.tmp:${REF}"
    mv -f "${archive}.tmp" "${archive}"
    # Older archives of this image are no longer needed (exactly NAME-<hash>: neuron-plugin's pattern must not
    # match neuron-plugin-fewer's archives).
    find "${CACHE_DIR}/archives" -name "${NAME}-????????????????.tar" ! -name "${NAME}-${hash}.tar" -delete
  fi
  rm -rf "${ctx}"
  echo "${archive}"
}

# One build at a time per user cache (parallel `up`s share the storage and the archives).
lock() {
  mkdir -p "${CACHE_DIR}"
  exec 6>"${CACHE_DIR}/build.lock"
  flock 6
}

cmd_build() {
  local n
  lock
  if (($# == 0)); then mapfile -t names_ < <(names); set -- "${names_[@]}"; fi
  for n in "$@"; do build_one "${n}" >/dev/null; done
}

# import CTR SOCK [NAME...]: the images into the k8s.io namespace (the one the kubelet's CRI uses) of the containerd
# listening on SOCK, with its ctr.
cmd_import() {
  [[ -x "${1:-}" && -S "${2:-}" ]] || die "usage: $0 import CTR SOCK [NAME...]"
  local ctr="$1" address n archive
  address="$(readlink -f "$2")"
  shift 2
  lock
  if (($# == 0)); then mapfile -t names_ < <(names); set -- "${names_[@]}"; fi
  for n in "$@"; do
    archive="$(build_one "${n}")"
    entry "${n}"
    # ctr warns about cgroup v1 on every call; that is said once, in docs/local-node.md.
    "${ctr}" --address "${address}" -n k8s.io images import "${archive}" >/dev/null \
      2> >(grep -v "DEPRECATION: The support for cgroup v1" >&2)
    log "imported ${REF}"
  done
}

main() {
  local cmd="${1:-}"
  shift || true
  case "${cmd}" in
    build) cmd_build "$@" ;;
    import) cmd_import "$@" ;;
    ref) entry "${1:-}"; echo "${REF}" ;;
    archive) build_one "${1:-}" ;;
    list) local n; for n in $(names); do entry "${n}"; echo "${NAME} ${REF}"; done ;;
    *) echo "usage: $0 build [NAME...]|import CTR SOCK [NAME...]|ref NAME|archive NAME|list" >&2; exit 2 ;;
  esac
}

main "$@"; exit
