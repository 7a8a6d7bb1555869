#!/usr/bin/env bash
# A real, local Kubernetes control plane for the integration tests:
# etcd + kube-apiserver + kube-controller-manager + kube-scheduler, built from
# Go modules (tests/controlplane) and run as plain background processes. No
# kubelet and no containers: the simulator stands in for the kubelets. NODES=N
# adds N real nodes (kubelet + containerd, hack/node.sh; docs/local-node.md).
#
#   hack/controlplane.sh build    build the binaries into the user cache (once per version)
#   hack/controlplane.sh up       build if needed, start (or reuse) the control plane
#                                 (NODES=N: and real nodes node-1..node-N, see hack/node.sh)
#   hack/controlplane.sh down     stop it and remove target/controlplane/
#   hack/controlplane.sh status   exit 0 and print the kubeconfig if it is running
#   hack/controlplane.sh stop-component NAME / start-component NAME
#                                 stop one component (etcd, kube-apiserver, ...) and start it again as it was
#                                 (outage tests); kubelet and containerd take a node name (default node-1)
#   hack/controlplane.sh build-kubelet   build the kubelet of the same release (hack/node.sh does, on demand)
#
# After `up`: export KUBECONFIG=<repo>/target/controlplane/kubeconfig (admin, system:masters).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/ports.sh
source "${REPO_ROOT}/hack/lib/ports.sh"
# shellcheck source=hack/lib/lab.sh
source "${REPO_ROOT}/hack/lib/lab.sh"
STATE_DIR="${REPO_ROOT}/target/controlplane"
NODE_SH="${REPO_ROOT}/hack/node.sh"
# How many real nodes `up` starts (node-1..node-N); 0, the default, keeps the control plane node-less.
NODES="${NODES:-0}"
[[ "${NODES}" =~ ^[0-9]+$ ]] || { echo "controlplane: NODES=${NODES} is not a number" >&2; exit 1; }
KUBECONFIG_OUT="${STATE_DIR}/kubeconfig"

# Which Kubernetes: KUBE_VERSION (default the oldest supported release). Each supported minor has its own
# wrapper module, tests/controlplane/v1.<minor>, whose require line is the single source of the exact release.
KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
[[ "${KUBE_VERSION}" =~ ^v?([0-9]+)\.([0-9]+)(\.[0-9]+)?$ ]] || {
  echo "controlplane: KUBE_VERSION=${KUBE_VERSION} is not a version like v1.37.2" >&2
  exit 1
}
KUBE_MAJOR="${BASH_REMATCH[1]}"
KUBE_MINOR="${BASH_REMATCH[2]}"
MODULE_DIR="${REPO_ROOT}/tests/controlplane/v${KUBE_MAJOR}.${KUBE_MINOR}"
[[ -f "${MODULE_DIR}/go.mod" ]] || {
  echo "controlplane: no wrapper module for ${KUBE_VERSION}; supported: $(cd "${REPO_ROOT}/tests/controlplane" && ls -d v1.* | tr '\n' ' ')" >&2
  exit 1
}
MODULE_VERSION="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "${MODULE_DIR}/go.mod")"
if [[ -n "${BASH_REMATCH[3]}" && "v${KUBE_VERSION#v}" != "${MODULE_VERSION}" ]]; then
  echo "controlplane: tests/controlplane/v${KUBE_MAJOR}.${KUBE_MINOR} builds ${MODULE_VERSION}, not ${KUBE_VERSION}" >&2
  exit 1
fi
KUBE_VERSION="${MODULE_VERSION}"

CACHE_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/neuron-dra-operator/controlplane/${KUBE_VERSION}"
BIN_DIR="${CACHE_DIR}/bin"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler)
ETCD_DIR="${REPO_ROOT}/tests/controlplane/etcd"

# What each release needs switched on to serve what the operator and its tests use. Everything else is the
# release's default, so each run sees what a cluster of that version serves.
case "${KUBE_MINOR}" in
  34)
    # Device taints are alpha in 1.34 (DeviceTaintRule in resource.k8s.io/v1alpha3, off by default); EKS 1.34
    # enables neither, so the tests that need them switch them on here. The beta DRA versions are listed so
    # clients that still speak them keep working if that default changes. Extended-resource mapping
    # (DRAExtendedResource, alpha) stays off: the operator must refuse it on this version.
    FEATURE_GATES="DRADeviceTaints=true"
    RUNTIME_CONFIG="resource.k8s.io/v1alpha3=true,resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"
    ;;
  *)
    # 1.37: device taints, DeviceTaintRule (resource.k8s.io/v1), extended-resource mapping and the prioritized
    # list are GA and on by default.
    FEATURE_GATES=""
    RUNTIME_CONFIG=""
    ;;
esac
# Only the controllers the operator relies on and the ones a real node's faults need, with everything
# workload-related we do not use left out. Deployments and ReplicaSets are on so the install tests see the
# operator's own pods created, that is admitted under its namespace's Pod Security enforcement; Jobs for the
# training example (examples/training-job.yaml).
CONTROLLERS="garbage-collector-controller,namespace-controller,daemonset-controller"
CONTROLLERS+=",deployment-controller,replicaset-controller,job-controller"
CONTROLLERS+=",serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller"
CONTROLLERS+=",clusterrole-aggregation-controller,resourceclaim-controller,device-taint-eviction-controller"
# Counts what ResourceQuotas cap (the teams' device budgets): until it has, quota admission refuses every claim.
CONTROLLERS+=",resourcequota-controller"
# EndpointSlices, for what finds pods through a Service as Prometheus does (the chart's `helm test`); PDB status,
# without which the eviction API refuses every pod a PodDisruptionBudget covers.
CONTROLLERS+=",endpointslice-controller,disruption-controller"
# Type-checks each ValidatingAdmissionPolicy's expressions against the types it matches (status.typeChecking), which
# tests/least_privilege.rs reads for config/rbac's fences, as a real cluster's controller manager reports it.
CONTROLLERS+=",validatingadmissionpolicy-status-controller"
# A node that stops heartbeating goes NotReady and is tainted node.kubernetes.io/unreachable (node-lifecycle), its
# pods are evicted once their tolerationSeconds pass (taint-eviction), and pods of deleted nodes are removed
# (pod-garbage-collector). The simulator renews its nodes' Leases as kubelets do (src/devtools/simulate/lease.rs),
# so only a real node that dies is affected. Shortened for tests (docs/local-node.md): NODE_MONITOR_GRACE_PERIOD
# without a heartbeat counts a node unreachable (default 50s; the real node's kubelet renews its Lease every 2.5s,
# the simulator every 3s), checked every NODE_MONITOR_PERIOD (default 5s); the DefaultTolerationSeconds admission
# plugin gives every pod TOLERATION_SECONDS (default 300) on a not-ready or unreachable node before eviction.
CONTROLLERS+=",node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller"
NODE_MONITOR_GRACE_PERIOD="${NODE_MONITOR_GRACE_PERIOD:-12s}"
NODE_MONITOR_PERIOD="${NODE_MONITOR_PERIOD:-2s}"
TOLERATION_SECONDS="${TOLERATION_SECONDS:-5}"
# SCHEDULER_PROFILING=1 serves the scheduler's Go profiles (/debug/pprof/ on its secure port, delegated auth like its
# /metrics: the admin's client certificate may read them), for finding where its time goes (docs/benchmarks.md).
# Off by default, as in the components' other flags here.
case "${SCHEDULER_PROFILING:-0}" in
  1) SCHEDULER_PROFILING_FLAG=true ;;
  0) SCHEDULER_PROFILING_FLAG=false ;;
  *) echo "controlplane: SCHEDULER_PROFILING=${SCHEDULER_PROFILING} is not 0 or 1" >&2; exit 1 ;;
esac

READY_TIMEOUT="${CONTROLPLANE_READY_TIMEOUT:-120}"

log() { echo "controlplane: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------

# Hash of everything that determines the binaries (module files, Go version
# and the build recipe below); any change rebuilds.
build_stamp() {
  (
    cd "${MODULE_DIR}"
    cat go.mod go.sum tools.go "${ETCD_DIR}"/go.mod "${ETCD_DIR}"/go.sum "${ETCD_DIR}"/main.go
    go env GOVERSION
    declare -f cmd_build go_build_env
  ) | sha256sum | cut -d' ' -f1
}

binaries_present() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "${BIN_DIR}/${b}" ]] || return 1; done
}

# Sets goenv and goflags (arrays, declared local by the caller) for building Kubernetes commands from the wrapper
# module: the same for the control plane and the kubelet, so the kubelet reuses the packages the control plane build
# left in the Go build cache.
go_build_env() {
  # Same -X variables as kubernetes' hack/lib/version.sh, so /version reports
  # the real release. gitCommit is set empty (instead of the "$Format:%H$"
  # placeholder): the module proxy does not tell us the commit.
  # (1.34 has no separate version/base package to set.)
  local x="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=${KUBE_MAJOR} -X ${pkg}.gitMinor=${KUBE_MINOR}"
    x+=" -X ${pkg}.gitCommit= -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  # CGO off: static binaries like upstream's, and no C toolchain needed.
  # GOWORK off: never let a go.work higher up change the module graph.
  goenv=(env CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly)
  goflags=(-trimpath -ldflags "-s -w${x}")
}

cmd_build() {
  command -v go >/dev/null || die "go is required to build the control plane"
  mkdir -p "${BIN_DIR}"
  # Serialise concurrent builds (e.g. parallel test runs calling `up`).
  exec 8>"${CACHE_DIR}/build.lock"
  flock 8

  local stamp
  stamp="$(build_stamp)"
  if binaries_present && [[ "$(cat "${BIN_DIR}/.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    exec 8>&-
    return 0
  fi
  rm -f "${BIN_DIR}/.stamp"

  local -a goenv goflags
  go_build_env

  local start=${SECONDS} out="${BIN_DIR}/.build"
  rm -rf "${out}"
  mkdir -p "${out}"
  # One go build for the four Kubernetes commands, the kubelet included (hack/node.sh runs it): their common
  # packages are compiled once and the four links run side by side; etcd is its own module.
  log "building kube-apiserver, kube-controller-manager, kube-scheduler and kubelet ${KUBE_VERSION} (first time ~10 minutes on 2 cores, seconds when the Go build cache is warm)..."
  (cd "${MODULE_DIR}" && "${goenv[@]}" go build "${goflags[@]}" -o "${out}/" k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet)
  log "building etcd..."
  (cd "${ETCD_DIR}" && "${goenv[@]}" go build -trimpath -ldflags "-s -w" -o "${out}/etcd" .)
  local b
  for b in "${BINARIES[@]}" kubelet; do mv -f "${out}/${b}" "${BIN_DIR}/${b}"; done
  rmdir "${out}"
  kubelet_stamp >"${BIN_DIR}/.kubelet-stamp"
  echo "${stamp}" >"${BIN_DIR}/.stamp"
  log "built ${BINARIES[*]} kubelet into ${BIN_DIR} in $((SECONDS - start))s"
  exec 8>&-
}

# The kubelet of the same release, for the opt-in local node (hack/node.sh). Built from the same wrapper module with
# the same flags as the control plane, but on demand and with a stamp of its own, so a plain `build` or `up` stays
# as fast as before.
kubelet_stamp() {
  (
    cd "${MODULE_DIR}"
    cat go.mod go.sum tools.go
    go env GOVERSION
    declare -f cmd_build_kubelet go_build_env
  ) | sha256sum | cut -d' ' -f1
}

cmd_build_kubelet() {
  command -v go >/dev/null || die "go is required to build the kubelet"
  mkdir -p "${BIN_DIR}"
  exec 8>"${CACHE_DIR}/build.lock"
  flock 8
  local stamp
  stamp="$(kubelet_stamp)"
  if [[ -x "${BIN_DIR}/kubelet" && "$(cat "${BIN_DIR}/.kubelet-stamp" 2>/dev/null)" == "${stamp}" ]]; then
    exec 8>&-
    return 0
  fi
  rm -f "${BIN_DIR}/.kubelet-stamp"
  local -a goenv goflags
  go_build_env
  local start=${SECONDS}
  log "building kubelet ${KUBE_VERSION} (a few minutes when the control plane build has warmed the Go build cache)..."
  (cd "${MODULE_DIR}" && "${goenv[@]}" go build "${goflags[@]}" -o "${BIN_DIR}/kubelet.tmp" k8s.io/kubernetes/cmd/kubelet)
  mv -f "${BIN_DIR}/kubelet.tmp" "${BIN_DIR}/kubelet"
  echo "${stamp}" >"${BIN_DIR}/.kubelet-stamp"
  log "built kubelet into ${BIN_DIR} in $((SECONDS - start))s"
  exec 8>&-
}

# ---------------------------------------------------------------------------
# process helpers
# ---------------------------------------------------------------------------

# Prints the pid of component $1 if it is alive AND really is our process
# (its command line mentions our state dir, or for the forward our lab's namespace), so a recycled pid is never
# killed.
live_pid() {
  local pidfile="${STATE_DIR}/$1.pid" pid
  [[ -f "${pidfile}" ]] || return 1
  pid="$(cat "${pidfile}")"
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  kill -0 "${pid}" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF -e "${STATE_DIR}" -e "${LAB_NETNS_PATH}" || return 1
  echo "${pid}"
}

all_alive() {
  local b
  for b in "${BINARIES[@]}" forward; do live_pid "${b}" >/dev/null || return 1; done
}

# Like all_alive, but only for the components started so far.
started_alive() {
  local b
  # Only whether each started process still exists: right after the fork, before its exec, its command line is
  # still this script's, so the command-line check of live_pid would call a starting component dead.
  for b in "${BINARIES[@]}" forward; do
    [[ ! -f "${STATE_DIR}/${b}.pid" ]] || kill -0 "$(cat "${STATE_DIR}/${b}.pid")" 2>/dev/null || return 1
  done
}

apiserver_ready() {
  [[ -f "${STATE_DIR}/apiserver.url" ]] || return 1
  lab_exists || return 1
  lab_exec curl -fsS --max-time 5 --cacert "${STATE_DIR}/pki/ca.crt" \
    --cert "${STATE_DIR}/pki/admin.crt" --key "${STATE_DIR}/pki/admin.key" \
    "$(cat "${STATE_DIR}/apiserver.url")/readyz" 2>/dev/null | grep -qx ok
}

kcm_healthy() {
  lab_exec curl -kfs --max-time 5 -o /dev/null "https://127.0.0.1:$1/healthz"
}

default_sa_exists() {
  kubectl --kubeconfig="${KUBECONFIG_OUT}" --request-timeout=5s \
    get serviceaccount default -n default -o name >/dev/null 2>&1
}

# Stops every component we have a pid for, the scheduler first and etcd last.
# Each component was started with setsid, so its pid is also its process
# group id; signalling the group catches any children it may have.
stop_all() {
  local b pid
  for b in forward kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if pid="$(live_pid "${b}")"; then stop_pid "${pid}"; fi
  done
}

# start NAME BINARY ARGS... : run in the lab's network namespace, in the background in its own session, with
# stdio on a log file (so a caller that captures our output never waits on
# it) and fd 9 (the state lock) closed so the daemon does not keep holding it.
start() {
  local name="$1"; shift
  # The command line is kept so `start-component` can run the component again as it was.
  printf '%s\0' "$@" >"${STATE_DIR}/${name}.args"
  setsid nohup nsenter --net="${LAB_NETNS_PATH}" -- "$@" </dev/null >>"${STATE_DIR}/${name}.log" 2>&1 9>&- &
  echo $! >"${STATE_DIR}/${name}.pid"
}

# start_forward: the host's loopback forward to the API server (the one process of the lab in the host's namespace).
start_forward() {
  local port
  port="$(sed -E 's/.*:([0-9]+)$/\1/' "${STATE_DIR}/apiserver.url")"
  setsid nohup python3 "${REPO_ROOT}/hack/lib/forward.py" "${port}" "${LAB_NETNS_PATH}" "${port}" </dev/null \
    >>"${STATE_DIR}/forward.log" 2>&1 9>&- &
  echo $! >"${STATE_DIR}/forward.pid"
}

# The API server through the host's forward: what a kubectl on the host sees.
forward_ready() {
  curl -fsS --max-time 5 --cacert "${STATE_DIR}/pki/ca.crt" --cert "${STATE_DIR}/pki/admin.crt" \
    --key "${STATE_DIR}/pki/admin.key" "$(cat "${STATE_DIR}/apiserver.url")/readyz" 2>/dev/null | grep -qx ok
}

# stop_pid PID: TERM its process group, then KILL after 5 seconds.
stop_pid() {
  local pid="$1" i
  kill -TERM -- "-${pid}" 2>/dev/null || kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "${pid}" 2>/dev/null || return 0
    sleep 0.1
  done
  log "pid ${pid} ignored SIGTERM, sending SIGKILL"
  kill -KILL -- "-${pid}" 2>/dev/null || kill -KILL "${pid}" 2>/dev/null || true
}

component_name() {
  case "$1" in
    etcd | kube-apiserver | kube-controller-manager | kube-scheduler) ;;
    *) die "unknown component '$1' (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, containerd)" ;;
  esac
}

# Outage tests: stop one component of a running control plane, and start it again with the same command line.
# A node's kubelet and containerd are hack/node.sh's (NAME defaults to node-1).
cmd_stop_component() {
  case "$1" in kubelet | containerd) exec "${NODE_SH}" stop-component "$1" "${2:-}" ;; esac
  component_name "$1"
  lock_state
  local pid
  pid="$(live_pid "$1")" || die "$1 is not running"
  stop_pid "${pid}"
  log "$1 stopped"
}

cmd_start_component() {
  case "$1" in kubelet | containerd) exec "${NODE_SH}" start-component "$1" "${2:-}" ;; esac
  component_name "$1"
  lock_state
  ! live_pid "$1" >/dev/null || die "$1 is already running"
  [[ -f "${STATE_DIR}/$1.args" ]] || die "$1 was never started here: run '$0 up'"
  local -a args
  mapfile -d '' args <"${STATE_DIR}/$1.args"
  start "$1" "${args[@]}"
  wait_for "kube-apiserver /readyz" apiserver_ready
  log "$1 started"
}

# ---------------------------------------------------------------------------
# certificates
# ---------------------------------------------------------------------------

# sign NAME SUBJECT EXTENSIONS : key + certificate signed by our CA.
sign() {
  local pki="${STATE_DIR}/pki" name="$1" subj="$2" ext="$3"
  openssl genrsa -out "${pki}/${name}.key" 2048 2>/dev/null
  openssl req -new -key "${pki}/${name}.key" -subj "${subj}" -out "${pki}/${name}.csr" 2>/dev/null
  printf '%s\n' "${ext}" >"${pki}/${name}.ext"
  openssl x509 -req -in "${pki}/${name}.csr" -CA "${pki}/ca.crt" -CAkey "${pki}/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "${pki}/${name}.ext" -out "${pki}/${name}.crt" 2>/dev/null
  rm -f "${pki}/${name}.csr" "${pki}/${name}.ext"
}

gen_pki() {
  local pki="${STATE_DIR}/pki"
  mkdir -p "${pki}"
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=neuron-dra-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -keyout "${pki}/ca.key" -out "${pki}/ca.crt" 2>/dev/null
  local client="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  sign admin "/O=system:masters/CN=admin" "${client}"
  sign kube-controller-manager "/CN=system:kube-controller-manager" "${client}"
  sign kube-scheduler "/CN=system:kube-scheduler" "${client}"
  sign front-proxy-client "/CN=front-proxy-client" "${client}"
  # The API server's identity towards kubelets (logs, exec, port-forward of pods on the real nodes of hack/node.sh).
  sign kube-apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" "${client}"
  # Serving certificate signed by our CA (rather than the apiserver's own
  # --cert-dir self-signed one) so that one CA file verifies the server for
  # kubectl, the Rust client (rustls wants proper SANs/extensions) and
  # in-cluster clients (--root-ca-file).
  sign apiserver "/CN=kube-apiserver" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:${LAB_ADDRESS},IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  # Service-account token signing key pair.
  openssl genrsa -out "${pki}/sa.key" 2048 2>/dev/null
  openssl rsa -in "${pki}/sa.key" -pubout -out "${pki}/sa.pub" 2>/dev/null
}

# write_kubeconfig FILE USER : self-contained kubeconfig (certificates inlined).
write_kubeconfig() {
  local file="$1" user="$2" pki="${STATE_DIR}/pki"
  cat >"${file}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: neuron-dra-test
  cluster:
    server: $(cat "${STATE_DIR}/apiserver.url")
    certificate-authority-data: $(base64 -w0 "${pki}/ca.crt")
users:
- name: ${user}
  user:
    client-certificate-data: $(base64 -w0 "${pki}/${user}.crt")
    client-key-data: $(base64 -w0 "${pki}/${user}.key")
contexts:
- name: neuron-dra-test
  context:
    cluster: neuron-dra-test
    user: ${user}
current-context: neuron-dra-test
EOF
  chmod 600 "${file}"
}

# ---------------------------------------------------------------------------
# up / down / status
# ---------------------------------------------------------------------------

lock_state() {
  mkdir -p "$(dirname "${STATE_DIR}")"
  exec 9>"${STATE_DIR}.lock"
  flock 9
}

print_export() { echo "export KUBECONFIG=${KUBECONFIG_OUT}"; }

fail_with_logs() {
  log "$*"
  local b
  for b in "${BINARIES[@]}"; do
    [[ -f "${STATE_DIR}/${b}.log" ]] || continue
    echo "----- tail ${STATE_DIR}/${b}.log -----" >&2
    tail -n 30 "${STATE_DIR}/${b}.log" >&2
  done
  log "leaving ${STATE_DIR} for inspection; run '$0 down' to clean up"
  exit 1
}

# wait_for DESCRIPTION COMMAND... : poll until COMMAND succeeds, a component
# dies, or READY_TIMEOUT seconds pass since `up` started.
wait_for() {
  local what="$1"; shift
  until "$@"; do
    started_alive || fail_with_logs "a component exited while waiting for ${what}"
    ((SECONDS < READY_TIMEOUT)) || fail_with_logs "timed out after ${READY_TIMEOUT}s waiting for ${what}"
    sleep 0.5
  done
}

cmd_up() {
  cmd_build
  lock_state

  if [[ -d "${STATE_DIR}" ]]; then
    if [[ "$(cat "${STATE_DIR}/version" 2>/dev/null)" != "${KUBE_VERSION}" ]]; then
      log "the running control plane is not ${KUBE_VERSION}: replacing it"
    elif all_alive && apiserver_ready && [[ -f "${KUBECONFIG_OUT}" ]]; then
      log "already running, reusing it"
      start_nodes
      print_export
      return 0
    fi
    # The forward a new start makes belongs in the host's namespace (hack/lib/lab.sh).
    ! in_lab || die "run 'up' from the host's network namespace, not inside the lab (${LAB_NETNS})"
    log "removing stale ${STATE_DIR}"
    stop_nodes
    stop_all
    rm -rf "${STATE_DIR}"
    lab_down
  fi
  ! in_lab || die "run 'up' from the host's network namespace, not inside the lab (${LAB_NETNS})"
  lab_up
  mkdir -p "${STATE_DIR}"
  echo "${KUBE_VERSION}" >"${STATE_DIR}/version"
  SECONDS=0

  gen_pki
  local pki="${STATE_DIR}/pki" etcd_port etcd_peer_port api_port kcm_port sched_port
  read -r etcd_port etcd_peer_port api_port kcm_port sched_port <<<"$(free_ports 5 127.0.0.1)"
  echo "https://127.0.0.1:${api_port}" >"${STATE_DIR}/apiserver.url"
  write_kubeconfig "${STATE_DIR}/kube-controller-manager.kubeconfig" kube-controller-manager
  write_kubeconfig "${STATE_DIR}/kube-scheduler.kubeconfig" kube-scheduler

  # --unsafe-no-fsync: the data is thrown away at `down`; fsync only slows tests.
  start etcd "${BIN_DIR}/etcd" \
    --name=default \
    --data-dir="${STATE_DIR}/etcd" \
    --listen-client-urls="http://127.0.0.1:${etcd_port}" \
    --advertise-client-urls="http://127.0.0.1:${etcd_port}" \
    --listen-peer-urls="http://127.0.0.1:${etcd_peer_port}" \
    --initial-advertise-peer-urls="http://127.0.0.1:${etcd_peer_port}" \
    --initial-cluster="default=http://127.0.0.1:${etcd_peer_port}" \
    --unsafe-no-fsync=true \
    --log-level=warn

  # --bind-address=0.0.0.0: every address of the lab's namespace: its loopback (the tests, the host's forward) and
  #   its bridge (the real nodes and their pods, at ${LAB_ADDRESS}).
  # --advertise-address=127.0.0.1 + --endpoint-reconciler-type=none: the
  #   apiserver would otherwise publish the host's first non-loopback address
  #   (unreachable: we bind to loopback) in the `kubernetes` Endpoints, and a
  #   loopback address is rejected there, so the Endpoints are not managed at
  #   all (as in upstream's test/integration/framework). No pods run anyway.
  # --requestheader-*/--proxy-client-*: the front-proxy (aggregation layer)
  #   setup of a real cluster; without it the controller manager's delegated
  #   authentication logs an error about the missing request-header CA forever.
  # --allow-privileged: the driver DaemonSet's pods are privileged.
  # --kubelet-*: how it reaches the kubelets of real nodes (hack/node.sh), as in a real cluster: its own client
  #   certificate, the kubelet's serving certificate verified with our CA, at the Node's InternalIP (the kubelet
  #   also reports its node name as Hostname, which does not resolve here). Inert without real nodes.
  # --enable-admission-plugins=NodeRestriction: with the Node authorizer, limits a kubelet to its own Node and
  #   pods, as in every real cluster. Only requests of system:node:* users are affected.
  start kube-apiserver "${BIN_DIR}/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:${etcd_port}" \
    --bind-address=0.0.0.0 \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --secure-port="${api_port}" \
    --cert-dir="${STATE_DIR}/kube-apiserver" \
    --tls-cert-file="${pki}/apiserver.crt" \
    --tls-private-key-file="${pki}/apiserver.key" \
    --client-ca-file="${pki}/ca.crt" \
    --requestheader-client-ca-file="${pki}/ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="${pki}/front-proxy-client.crt" \
    --proxy-client-key-file="${pki}/front-proxy-client.key" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="${pki}/sa.pub" \
    --service-account-signing-key-file="${pki}/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true \
    --kubelet-client-certificate="${pki}/kube-apiserver-kubelet-client.crt" \
    --kubelet-client-key="${pki}/kube-apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="${pki}/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --enable-admission-plugins=NodeRestriction \
    --default-not-ready-toleration-seconds="${TOLERATION_SECONDS}" \
    --default-unreachable-toleration-seconds="${TOLERATION_SECONDS}" \
    --feature-gates="${FEATURE_GATES}" \
    --runtime-config="${RUNTIME_CONFIG}" \
    --profiling=false

  # The controller manager exits at once if it cannot read its RBAC-protected
  # configuration, so it only starts once the apiserver has bootstrapped RBAC.
  wait_for "kube-apiserver /readyz" apiserver_ready
  start_forward
  wait_for "the host's forward to kube-apiserver" forward_ready

  # --use-service-account-credentials: each controller runs as its own
  #   system:serviceaccount:kube-system:<controller>, as in a real cluster, so
  #   RBAC problems show up here too.
  # --authentication/authorization-kubeconfig: lets its /healthz be served with
  #   delegated auth instead of logging warnings.
  # --kube-api-qps/burst: the defaults (20/30) take minutes to roll a DaemonSet out
  #   to the thousands of simulated nodes of the benchmarks.
  start kube-controller-manager "${BIN_DIR}/kube-controller-manager" \
    --kubeconfig="${STATE_DIR}/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="${STATE_DIR}/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="${STATE_DIR}/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="${kcm_port}" \
    --cert-dir="${STATE_DIR}/kube-controller-manager" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="${pki}/sa.key" \
    --root-ca-file="${pki}/ca.crt" \
    --controllers="${CONTROLLERS}" \
    --node-monitor-grace-period="${NODE_MONITOR_GRACE_PERIOD}" \
    --node-monitor-period="${NODE_MONITOR_PERIOD}" \
    --feature-gates="${FEATURE_GATES}" \
    --kube-api-qps=300 \
    --kube-api-burst=600 \
    --profiling=false

  wait_for "kube-controller-manager /healthz" kcm_healthy "${kcm_port}"

  # The real scheduler, with its DRA plugin (on by default since 1.34), binds
  # every pod; the simulated kubelets only report the pods bound to them.
  # --kube-api-qps/burst: as for the controller manager, so thousands of
  # plugin pods are bound in seconds, not minutes.
  start kube-scheduler "${BIN_DIR}/kube-scheduler" \
    --kubeconfig="${STATE_DIR}/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="${STATE_DIR}/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="${STATE_DIR}/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="${sched_port}" \
    --leader-elect=false \
    --feature-gates="${FEATURE_GATES}" \
    --kube-api-qps=300 \
    --kube-api-burst=600 \
    --profiling="${SCHEDULER_PROFILING_FLAG}"

  wait_for "kube-scheduler /healthz" kcm_healthy "${sched_port}"
  write_kubeconfig "${KUBECONFIG_OUT}" admin
  # The serviceaccount controller creating default/default is the sign that
  # the controllers are really working, and tests creating pods need it.
  wait_for "the default ServiceAccount" default_sa_exists
  log "ready in ${SECONDS}s: $(cat "${STATE_DIR}/apiserver.url") (logs in ${STATE_DIR}/*.log)"
  start_nodes
  print_export
}

# NODES real nodes, started (or reused) by hack/node.sh once the control plane is up.
start_nodes() {
  local i
  for ((i = 1; i <= NODES; i++)); do "${NODE_SH}" up "node-${i}" 9>&-; done
}

# Real nodes first: their containers, mounts and network namespaces live below the state dir, which goes next.
stop_nodes() {
  [[ ! -d "${STATE_DIR}/nodes" ]] || "${NODE_SH}" down 9>&-
}

cmd_down() {
  lock_state
  stop_nodes
  stop_all
  rm -rf "${STATE_DIR}"
  lab_down
  log "stopped"
}

cmd_status() {
  if [[ -d "${STATE_DIR}" ]] && all_alive && apiserver_ready; then
    echo "running: $(cat "${STATE_DIR}/apiserver.url")"
    local n
    for n in "${STATE_DIR}"/nodes/*/; do
      [[ -d "${n}" ]] || continue
      echo "node $(basename "${n}"): $("${NODE_SH}" status "$(basename "${n}")" 2>/dev/null | tr '\n' ' ')"
    done
    print_export
  elif [[ -d "${STATE_DIR}" ]]; then
    echo "not running (stale state in ${STATE_DIR}; '$0 up' or '$0 down' cleans it)"
    return 1
  else
    echo "not running"
    return 1
  fi
}

main() {
  case "${1:-}" in
    build) cmd_build ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    build-kubelet) cmd_build_kubelet ;;
    stop-component) cmd_stop_component "${2:-}" "${3:-}" ;;
    start-component) cmd_start_component "${2:-}" "${3:-}" ;;
    *) echo "usage: $0 build|build-kubelet|up|down|status|stop-component NAME [NODE]|start-component NAME [NODE]" >&2; exit 2 ;;
  esac
}

# Kept on one line so that bash has read everything before running it: editing
# this file while it runs (e.g. during the long first build) is then harmless.
main "$@"; exit
