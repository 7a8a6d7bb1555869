#!/usr/bin/env bash
# `make test` (what CI runs): lint (hack/lint.sh, as `make lint`), build, then the whole suite against a real local
# control plane of the oldest supported Kubernetes release and the DRA tests against the newest, each followed by the
# real-node tests. The control planes are stopped again even when a test fails. The Makefile passes the releases and test lists:
#   KUBE_OLDEST KUBE_NEWEST NEWEST_TESTS NODE_TESTS NODE_TESTS_NEWEST
#
# Everything that is built from Go modules is cached in ~/.cache, so only a cold machine builds it. There, what
# the Rust build does not need (actionlint first, for the workflow lint after the Rust build; Helm, the bundle
# validator, kstatus, Kueue's manager, the newest control plane and its kubelet) is built in the background at the lowest CPU
# priority (nice 19): it takes only the CPU the Rust build's serial stretches and the mostly waiting integration
# tests leave idle, so it neither slows the foreground nor makes timing-sensitive tests flaky, and by the newest
# phase it is usually done. Its log is target/background-build.log. A background
# build that fails is not fatal here: the tests that need a tool build it themselves (hack/tools.sh path), and the
# newest phase builds its control plane again in the foreground, where a failure stops the run with its error.
# Between the phases, `make release-check` builds and checks the release's fast subset (docs/release.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

: "${KUBE_OLDEST:?}" "${KUBE_NEWEST:?}" "${NEWEST_TESTS:?}" "${NODE_TESTS:?}" "${NODE_TESTS_NEWEST:?}"
CARGO="${CARGO:-cargo}"
KUBECONFIG_LOCAL="${PWD}/target/controlplane/kubeconfig"

log() { echo "test: $*" >&2; }

background=""
# shellcheck disable=SC2317 # called by the trap
stop_background() {
  [[ -z "${background}" ]] || kill -- "-${background}" 2>/dev/null || true
}
trap stop_background EXIT

mkdir -p target
log "building actionlint, Helm, the bundle validator, kstatus, Kueue's manager, the arm64 operator and Kubernetes ${KUBE_NEWEST} in the background (nice 19; target/background-build.log)"
# Its own process group (set -m), so stop_background ends the go builds too.
set -m
# shellcheck disable=SC2016 # expanded by the inner shell
nice -n 19 bash -c '
  set -e
  hack/tools.sh build actionlint helm bundle-validate kstatus kueue
  hack/release.sh binary aarch64 release-check >/dev/null
  KUBE_VERSION="$1" hack/controlplane.sh build
  KUBE_VERSION="$1" hack/node.sh build kubelet
' background-build "${KUBE_NEWEST}" >target/background-build.log 2>&1 &
background=$!
set +m

# `make lint`: format, clippy and the dependencies' licences first; the workflows after the Rust build, by when the
# background build has usually built actionlint (hack/tools.sh locks each tool on its own, so this waits at most for
# actionlint, never for the tools after it).
CARGO="${CARGO}" hack/lint.sh rust licenses
# Everything the tests run, built before any timing-sensitive test starts.
"${CARGO}" test --locked --no-run
hack/lint.sh workflows
KUBE_VERSION="${KUBE_OLDEST}" hack/controlplane.sh build
KUBE_VERSION="${KUBE_OLDEST}" hack/node.sh build
hack/images.sh build
hack/tools.sh build promtool

# phase NAME VERSION CARGO_TEST_ARGS NODE_TESTS: one control plane, its tests, then the real-node tests on it.
phase() {
  local version="$1" tests="$2" node_tests="$3" status=0
  KUBE_VERSION="${version}" hack/controlplane.sh up
  # shellcheck disable=SC2086 # the test lists are words
  KUBECONFIG="${KUBECONFIG_LOCAL}" "${CARGO}" test --locked --no-fail-fast ${tests} -- --test-threads=4 || status=$?
  make --no-print-directory test-node NODE_TESTS="${node_tests}" || status=$?
  hack/controlplane.sh down
  return "${status}"
}

status=0
phase "${KUBE_OLDEST}" "" "${NODE_TESTS}" || status=$?

if [[ -n "${background}" ]]; then
  log "waiting for the background build (target/background-build.log)"
  wait "${background}" || log "the background build failed (target/background-build.log); building again here"
  background=""
fi
# The release's fast subset, built and checked between the phases (no cluster; its binaries are built by now).
make --no-print-directory release-check || status=$?
KUBE_VERSION="${KUBE_NEWEST}" hack/controlplane.sh build
KUBE_VERSION="${KUBE_NEWEST}" hack/node.sh build kubelet
phase "${KUBE_NEWEST}" "${NEWEST_TESTS}" "${NODE_TESTS_NEWEST}" || status=$?
exit "${status}"
