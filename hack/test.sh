#!/usr/bin/env bash
# `make test` (what CI runs): lint (hack/lint.sh, as `make lint`), build, then the whole suite against a real local
# control plane of the oldest supported Kubernetes release and the DRA tests against the newest, each followed by the
# real-node tests. The control planes are stopped again even when a test fails. The Makefile passes the releases and test lists:
#   KUBE_OLDEST KUBE_NEWEST NEWEST_TESTS NODE_TESTS NODE_TESTS_NEWEST
#
# Everything that is built from Go modules is cached in ~/.cache, so only a cold machine builds it. There the order
# is chosen so that the cluster tests start as soon as the oldest control plane is built: containerd and the node
# images build in the background (nice 10) while those tests run, and the real-node tests wait for them; what only
# later steps need (actionlint first, for the workflow lint after the Rust build; Helm, the bundle validator,
# kstatus, Kueue's manager, the arm64 operator, the newest control plane and its kubelet) builds at the lowest
# priority (nice 19), taking the CPU the foreground leaves idle. Logs: target/node-build.log and
# target/background-build.log. A background build that fails is not fatal here: the step that needs it builds it
# again in the foreground, where a failure stops the run with its error. Between the phases, `make release-check`
# builds and checks the release's fast subset (docs/release.md). The tests run inside the lab's network namespace
# (hack/lab.sh, docs/local-node.md "Addresses"). CONTRIBUTING.md has the time of each step, cold and warm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

: "${KUBE_OLDEST:?}" "${KUBE_NEWEST:?}" "${NEWEST_TESTS:?}" "${NODE_TESTS:?}" "${NODE_TESTS_NEWEST:?}"
CARGO="${CARGO:-cargo}"
KUBECONFIG_LOCAL="${PWD}/target/controlplane/kubeconfig"

log() { echo "test: $*" >&2; }

# timed STEP CMD...: CMD, then a line with the seconds it took (CONTRIBUTING.md's table of steps comes from these).
timed() {
  local step="$1" start=${SECONDS} rc=0
  shift
  "$@" || rc=$?
  log "took $((SECONDS - start)) s: ${step}"
  return "${rc}"
}

# Two background builds, each in its own process group (set -m) so that stop_background ends its go and cargo builds:
#  - what the oldest phase's real nodes need (containerd, the images: the operator's static build, the plugin) at
#    nice 10, while the control plane builds and the cluster tests run (they mostly wait on the API server);
#  - what only later steps need (the tools, Kueue's manager, the arm64 operator, the newest control plane and its
#    kubelet) at nice 19, behind everything else.
node_parts=""
later=""
# shellcheck disable=SC2317 # called by the trap
stop_background() {
  local pgid
  for pgid in "${node_parts}" "${later}"; do [[ -z "${pgid}" ]] || kill -- "-${pgid}" 2>/dev/null || true; done
}
trap stop_background EXIT

# wait_background PID LOG WHAT: waits for one of them; a failure is not fatal here (the step that needs it builds
# again in the foreground, where a failure stops the run with its error).
# shellcheck disable=SC2317 # called through timed
wait_background() {
  [[ -n "$1" ]] || return 0
  log "waiting for the background build of $3 ($2)"
  wait "$1" || log "the background build of $3 failed ($2); building again where it is needed"
}

mkdir -p target
log "building actionlint, Helm, the bundle validator, kstatus, Kueue's manager, the arm64 operator and Kubernetes ${KUBE_NEWEST} in the background (nice 19; target/background-build.log)"
set -m
# shellcheck disable=SC2016 # expanded by the inner shell
nice -n 19 bash -c '
  set -e
  hack/tools.sh build actionlint helm bundle-validate kstatus kueue
  hack/release.sh binary aarch64 release-check >/dev/null
  KUBE_VERSION="$1" hack/controlplane.sh build
' background-build "${KUBE_NEWEST}" >target/background-build.log 2>&1 &
later=$!
set +m

# `make lint`: format, clippy and the dependencies' licences first; the workflows after the Rust build, by when the
# background build has usually built actionlint (hack/tools.sh locks each tool on its own, so this waits at most for
# actionlint, never for the tools after it).
timed "lint (fmt, clippy, licences)" env CARGO="${CARGO}" hack/lint.sh rust licenses
# Everything the tests run, built before any timing-sensitive test starts.
timed "cargo test --no-run" "${CARGO}" test --locked --no-run
timed "lint (workflows)" hack/lint.sh workflows
log "building containerd and the node images in the background (nice 10; target/node-build.log)"
set -m
nice -n 10 bash -c 'set -e; hack/node.sh build containerd; hack/images.sh build' >target/node-build.log 2>&1 &
node_parts=$!
set +m
# The control plane and its kubelet in one go build (hack/controlplane.sh build).
timed "Kubernetes ${KUBE_OLDEST} build" env KUBE_VERSION="${KUBE_OLDEST}" hack/controlplane.sh build
timed "promtool" hack/tools.sh build promtool

# phase VERSION CARGO_TEST_ARGS NODE_TESTS: one control plane, its tests, then the real-node tests on it.
phase() {
  local version="$1" tests="$2" node_tests="$3" status=0
  timed "${version}: control plane up" env KUBE_VERSION="${version}" hack/controlplane.sh up
  # Inside the lab's network namespace (hack/lab.sh), where the API server also reaches the webhook servers tests start.
  # shellcheck disable=SC2086 # the test lists are words
  timed "${version}: cluster tests" env KUBECONFIG="${KUBECONFIG_LOCAL}" hack/lab.sh exec "${CARGO}" test --locked \
    --no-fail-fast ${tests} -- --test-threads=4 || status=$?
  timed "${version}: waiting for containerd and the node images" \
    wait_background "${node_parts}" target/node-build.log "containerd and the node images"
  node_parts=""
  timed "${version}: real-node tests" make --no-print-directory test-node NODE_TESTS="${node_tests}" || status=$?
  hack/controlplane.sh down
  return "${status}"
}

status=0
phase "${KUBE_OLDEST}" "" "${NODE_TESTS}" || status=$?

timed "waiting for the tools, Kueue and Kubernetes ${KUBE_NEWEST}" \
  wait_background "${later}" target/background-build.log "the tools, Kueue and Kubernetes ${KUBE_NEWEST}"
later=""
# The release's fast subset, built and checked between the phases (no cluster; its binaries are built by now).
timed "release check" make --no-print-directory release-check || status=$?
timed "Kubernetes ${KUBE_NEWEST} build" env KUBE_VERSION="${KUBE_NEWEST}" hack/controlplane.sh build
phase "${KUBE_NEWEST}" "${NEWEST_TESTS}" "${NODE_TESTS_NEWEST}" || status=$?
exit "${status}"
