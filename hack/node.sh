#!/usr/bin/env bash
# A real node for the local control plane (hack/controlplane.sh): containerd v2 (CDI on), Debian's runc, CNI
# bridge + host-local from Debian's containernetworking-plugins, and the kubelet of the control plane's release,
# registered as a Node. Opt-in: `NODES=1 hack/controlplane.sh up` or `hack/node.sh up` next to a running control
# plane. Needs root (mounts, network namespaces, cgroups).
#
#   hack/node.sh build [containerd|kubelet]  build containerd, its runc shim and ctr, and the kubelet into the
#                                       user cache (both by default; once per version)
#   hack/node.sh up [NAME]              start node NAME (default node-1) against the running control plane
#   hack/node.sh down [NAME]            stop it, kill its containers, unmount and remove its state (every node
#                                       when NAME is omitted)
#   hack/node.sh status [NAME]          exit 0 when its kubelet and containerd run and the Node is Ready
#   hack/node.sh stop-component kubelet|containerd [NAME] / start-component ... / kill-component ... (SIGKILL)
#   hack/node.sh ctr [NAME] ARGS...     containerd's ctr against the node's containerd (e.g. `-n k8s.io images ls`)
#
# Environment: NODE_HOST_PLUGINS=0 (node-1 does not bind its kubelet plugin dirs onto /var/lib/kubelet/...),
# NODE_INSTANCE_TYPE (label node.kubernetes.io/instance-type, default trn2.48xlarge; empty: none),
# NODE_LABELS (more labels, k=v,...), NODE_IMAGES (the images to import, by hack/images.sh name; default all).
# A node's number picks its address, bridge and pod subnet (node-3: 10.243.3.1 in its own network namespace, bridge
# ndra3, pods in 10.244.3.0/24; hack/lib/lab.sh). State lives in target/controlplane/nodes/NAME, so the control
# plane's `down` also removes it. docs/local-node.md.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/lab.sh
source "${REPO_ROOT}/hack/lib/lab.sh"
CP_STATE="${REPO_ROOT}/target/controlplane"
CONTROLPLANE_SH="${REPO_ROOT}/hack/controlplane.sh"
CONTAINERD_MODULE="${REPO_ROOT}/tests/node/containerd"
CONTAINERD_VERSION="$(awk '$1 == "require" && $2 == "github.com/containerd/containerd/v2" { print $3 }' \
  "${CONTAINERD_MODULE}/go.mod")"
CACHE_ROOT="${XDG_CACHE_HOME:-${HOME}/.cache}/neuron-dra-operator"
CONTAINERD_BIN="${CACHE_ROOT}/node/containerd/${CONTAINERD_VERSION}/bin"
# Unset: trn2.48xlarge, so the operator selects the node (its plugin DaemonSet, health). Empty: no label, so the
# operator leaves the node alone (e.g. next to a simulated fleet whose health a test counts).
NODE_INSTANCE_TYPE="${NODE_INSTANCE_TYPE-trn2.48xlarge}"
READY_TIMEOUT="${NODE_READY_TIMEOUT:-120}"
# Every node's kubelet root directory, as its kubelet, containerd and pods see it (node_namespace below). A config's
# `driver.kubeletDir` names it for the plugin to run on these nodes.
NODE_KUBELET_DIR="/var/lib/ndra-kubelet"
# The pins of the nodes' mount namespaces (one file each).
NS_PINS="/run/ndra-ns"
# Name prefix of everything this script creates outside its state dir (cgroups, CNI cache entries), so `down`
# removes exactly those.
PREFIX="ndra"

log() { echo "node: $*" >&2; }
die() { log "$*"; exit 1; }

# The control plane's release decides the kubelet's: a running control plane's, else KUBE_VERSION, else the default.
kube_version() {
  if [[ -f "${CP_STATE}/version" ]]; then cat "${CP_STATE}/version"; else echo "${KUBE_VERSION:-v1.34.4}"; fi
}
kubelet_bin() { echo "${CACHE_ROOT}/controlplane/$(kube_version)/bin/kubelet"; }

# node_index NAME: node-3 -> 3, which picks its pod subnet and bridge.
node_index() {
  [[ "$1" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?-([0-9]+)$ ]] || die "node name '$1' must end in -<number> (node-1)"
  local n=$((10#${BASH_REMATCH[2]}))
  ((n >= 1 && n <= 250)) || die "node number must be 1..250: $1"
  echo "${n}"
}

set_node() {
  NODE_NAME="${1:-node-1}"
  NODE_INDEX="$(node_index "${NODE_NAME}")"
  NODE_STATE="${CP_STATE}/nodes/${NODE_NAME}"
  CGROUP_ROOT="/${PREFIX}-${NODE_NAME}"
  BRIDGE="${PREFIX}${NODE_INDEX}"
  POD_SUBNET="10.244.${NODE_INDEX}.0/24"
  CNI_NETWORK="${PREFIX}-${NODE_NAME}"
  CONTAINERD_SOCK="${NODE_STATE}/containerd/containerd.sock"
  NODE_NS="${NS_PINS}/${NODE_NAME}"
  # The node's network namespace, its address in the lab and its end of the veth pair there (hack/lib/lab.sh).
  NODE_NETNS="${LAB_NETNS}-${NODE_NAME}"
  NODE_NETNS_PATH="/run/netns/${NODE_NETNS}"
  NODE_ADDRESS="10.243.${NODE_INDEX}.1"
  LAB_LINK="node${NODE_INDEX}"
}

# The kubelet's ports in the node's own network namespace: the same on every node.
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248

# ---------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------

containerd_stamp() {
  (
    cd "${CONTAINERD_MODULE}"
    cat go.mod go.sum tools.go
    go env GOVERSION
    declare -f build_containerd
  ) | sha256sum | cut -d' ' -f1
}

build_containerd() {
  command -v go >/dev/null || die "go is required to build containerd"
  mkdir -p "${CONTAINERD_BIN}"
  exec 8>"${CONTAINERD_BIN}/../build.lock"
  flock 8
  local stamp
  stamp="$(containerd_stamp)"
  if [[ -x "${CONTAINERD_BIN}/containerd" && "$(cat "${CONTAINERD_BIN}/.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    exec 8>&-
    return 0
  fi
  rm -f "${CONTAINERD_BIN}/.stamp"
  # As containerd's Makefile builds its static release: netgo/osusergo/static_build, the shim without gRPC.
  # CGO off: no C toolchain needed; the cgo-only snapshotters (btrfs, devmapper) are left out, overlayfs is used.
  local pkg=github.com/containerd/containerd/v2
  local ldflags="-s -w -X ${pkg}/version.Version=${CONTAINERD_VERSION} -X ${pkg}/version.Package=${pkg}"
  local tags="urfave_cli_no_docs osusergo netgo static_build no_btrfs no_devmapper"
  local -a goenv=(env CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly)
  local start=${SECONDS} cmd
  log "building containerd ${CONTAINERD_VERSION}, containerd-shim-runc-v2 and ctr (a few minutes the first time)..."
  for cmd in containerd ctr; do
    (cd "${CONTAINERD_MODULE}" && "${goenv[@]}" go build -trimpath -tags "${tags}" -ldflags "${ldflags}" \
      -o "${CONTAINERD_BIN}/${cmd}.tmp" "${pkg}/cmd/${cmd}")
  done
  (cd "${CONTAINERD_MODULE}" && "${goenv[@]}" go build -trimpath -tags "${tags} no_grpc" -ldflags "${ldflags}" \
    -o "${CONTAINERD_BIN}/containerd-shim-runc-v2.tmp" "${pkg}/cmd/containerd-shim-runc-v2")
  for cmd in containerd ctr containerd-shim-runc-v2; do
    mv -f "${CONTAINERD_BIN}/${cmd}.tmp" "${CONTAINERD_BIN}/${cmd}"
  done
  echo "${stamp}" >"${CONTAINERD_BIN}/.stamp"
  log "built containerd ${CONTAINERD_VERSION} into ${CONTAINERD_BIN} in $((SECONDS - start))s"
  exec 8>&-
}

cmd_build() {
  [[ "${1:-kubelet}" != kubelet ]] || KUBE_VERSION="$(kube_version)" "${CONTROLPLANE_SH}" build-kubelet
  [[ "${1:-containerd}" != containerd ]] || build_containerd
}

# Debian packages the node runs but does not build.
check_host() {
  [[ ${EUID} -eq 0 ]] || die "the node needs root (mounts, network namespaces, cgroups)"
  local missing=() f
  command -v runc >/dev/null || missing+=(runc)
  for f in bridge host-local loopback; do [[ -x "/usr/lib/cni/${f}" ]] || missing+=(containernetworking-plugins); done
  command -v ip >/dev/null || missing+=(iproute2)
  command -v iptables >/dev/null || missing+=(iptables)
  ((${#missing[@]} == 0)) || die "missing: apt-get install -y $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')"
}

# ---------------------------------------------------------------------------
# processes (as in controlplane.sh: own session, pid and argument files, logs in the state dir)
# ---------------------------------------------------------------------------

live_pid() {
  local pidfile="${NODE_STATE}/$1.pid" pid
  [[ -f "${pidfile}" ]] || return 1
  pid="$(cat "${pidfile}")"
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  kill -0 "${pid}" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF "${NODE_STATE}" || return 1
  echo "${pid}"
}

# Whether a component just started still exists. Only the pid: right after the fork, before its exec, its command
# line is still this script's, so live_pid's command-line check would call a starting component dead.
started_alive() {
  [[ -f "${NODE_STATE}/$1.pid" ]] && kill -0 "$(cat "${NODE_STATE}/$1.pid")" 2>/dev/null
}

start() {
  local name="$1"; shift
  printf '%s\0' "$@" >"${NODE_STATE}/${name}.args"
  # The containerd binaries' directory comes first on PATH so containerd finds its own shim. In the node's mount
  # namespace (nsenter execs the command: the pid is the component's).
  PATH="${CONTAINERD_BIN}:${PATH}" setsid nohup nsenter --mount="${NODE_NS}" --net="${NODE_NETNS_PATH}" -- "$@" </dev/null \
    >>"${NODE_STATE}/${name}.log" 2>&1 7>&- 8>&- 9>&- &
  echo $! >"${NODE_STATE}/${name}.pid"
}

stop_pid() {
  local pid="$1" i
  kill -TERM -- "-${pid}" 2>/dev/null || kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "${pid}" 2>/dev/null || return 0
    sleep 0.1
  done
  log "pid ${pid} ignored SIGTERM, sending SIGKILL"
  kill -KILL -- "-${pid}" 2>/dev/null || kill -KILL "${pid}" 2>/dev/null || true
}

# wait_until DESCRIPTION COMMAND...: poll until COMMAND succeeds, failing with the logs after READY_TIMEOUT seconds
# or as soon as the component named by WAIT_COMPONENT dies.
wait_until() {
  local what="$1" deadline=$((SECONDS + READY_TIMEOUT)); shift
  until "$@"; do
    if [[ -n "${WAIT_COMPONENT:-}" ]] && ! started_alive "${WAIT_COMPONENT}"; then
      fail_with_logs "${WAIT_COMPONENT} exited while waiting for ${what}"
    fi
    ((SECONDS < deadline)) || fail_with_logs "timed out after ${READY_TIMEOUT}s waiting for ${what}"
    sleep 0.5
  done
}

fail_with_logs() {
  log "$*"
  local c
  for c in containerd kubelet; do
    [[ -f "${NODE_STATE}/${c}.log" ]] || continue
    echo "----- tail ${NODE_STATE}/${c}.log -----" >&2
    tail -n 30 "${NODE_STATE}/${c}.log" >&2
  done
  log "leaving ${NODE_STATE} for inspection; 'hack/node.sh down ${NODE_NAME}' cleans up"
  exit 1
}

kubectl_admin() { kubectl --kubeconfig="${CP_STATE}/kubeconfig" --request-timeout=10s "$@"; }

ctr_node() { "${CONTAINERD_BIN}/ctr" --address "${CONTAINERD_SOCK}" "$@"; }

# ---------------------------------------------------------------------------
# certificates and configuration
# ---------------------------------------------------------------------------

# sign NAME SUBJECT EXTENSIONS: key + certificate signed by the control plane's CA, into the node's pki.
sign() {
  local pki="${NODE_STATE}/pki" ca="${CP_STATE}/pki" name="$1" subj="$2" ext="$3"
  openssl genrsa -out "${pki}/${name}.key" 2048 2>/dev/null
  openssl req -new -key "${pki}/${name}.key" -subj "${subj}" -out "${pki}/${name}.csr" 2>/dev/null
  printf '%s\n' "${ext}" >"${pki}/${name}.ext"
  openssl x509 -req -in "${pki}/${name}.csr" -CA "${ca}/ca.crt" -CAkey "${ca}/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "${pki}/${name}.ext" -out "${pki}/${name}.crt" 2>/dev/null
  rm -f "${pki}/${name}.csr" "${pki}/${name}.ext"
}

# has_cap N: capability number N is in this process's bounding set.
has_cap() {
  local bnd
  bnd="$(awk '$1 == "CapBnd:" { print $2 }' /proc/self/status)"
  (( (16#${bnd} >> $1) & 1 ))
}

# node_network: the node's network namespace, joined to the lab's bridge by a veth pair; its address
# 10.243.<n>.1/16, its default route through the lab (LAB_ADDRESS, where the API server listens), and the lab's route to
# its pod subnet, so the API server reaches its kubelet and pods, and pods on different nodes reach each other.
node_network() {
  lab_exists || die "the lab's network namespace ${LAB_NETNS} is missing: run hack/controlplane.sh up"
  if [[ -e "${NODE_NETNS_PATH}" ]]; then ip netns delete "${NODE_NETNS}"; fi
  ip netns add "${NODE_NETNS}"
  ip -n "${NODE_NETNS}" link set lo up
  ip -n "${LAB_NETNS}" link add "${LAB_LINK}" type veth peer name eth0 netns "${NODE_NETNS}"
  ip -n "${LAB_NETNS}" link set "${LAB_LINK}" master "${LAB_BRIDGE}" up
  ip -n "${NODE_NETNS}" addr add "${NODE_ADDRESS}/16" dev eth0
  ip -n "${NODE_NETNS}" link set eth0 up
  ip -n "${NODE_NETNS}" route add default via "${LAB_ADDRESS}"
  ip -n "${LAB_NETNS}" route replace "${POD_SUBNET}" via "${NODE_ADDRESS}"
  node_exec sysctl -qw net.ipv4.ip_forward=1
}

# node_exec CMD...: CMD in the node's network namespace.
node_exec() { nsenter --net="${NODE_NETNS_PATH}" -- "$@"; }

remove_node_network() {
  if lab_exists; then ip -n "${LAB_NETNS}" route del "${POD_SUBNET}" 2>/dev/null || true; fi
  # Its veth pair goes with it.
  if [[ -e "${NODE_NETNS_PATH}" ]]; then ip netns delete "${NODE_NETNS}" || log "could not delete ${NODE_NETNS}"; fi
}

write_configs() {
  local pki="${NODE_STATE}/pki" node_ip="${NODE_ADDRESS}"
  mkdir -p "${pki}" "${NODE_STATE}/cni/net.d" "${NODE_STATE}/cdi" "${NODE_STATE}/kubelet"
  cp "${CP_STATE}/pki/ca.crt" "${pki}/ca.crt"
  # The kubelet's identity: the Node authorizer and NodeRestriction admit system:node:<name> in system:nodes to
  # exactly what belongs to its node.
  sign kubelet-client "/O=system:nodes/CN=system:node:${NODE_NAME}" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  # Serving certificate for the API server -> kubelet connections (logs, exec, port-forward), verified with the
  # same CA (--kubelet-certificate-authority).
  sign kubelet-serving "/CN=${NODE_NAME}" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:${node_ip},DNS:${NODE_NAME}"

  cat >"${NODE_STATE}/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: neuron-dra-test
  cluster:
    server: https://${LAB_ADDRESS}:$(api_port)
    certificate-authority: ${pki}/ca.crt
users:
- name: ${NODE_NAME}
  user:
    client-certificate: ${pki}/kubelet-client.crt
    client-key: ${pki}/kubelet-client.key
contexts:
- name: neuron-dra-test
  context: {cluster: neuron-dra-test, user: "${NODE_NAME}"}
current-context: neuron-dra-test
EOF
  chmod 600 "${NODE_STATE}/kubelet.kubeconfig"

  # One bridge per node with a /24 of 10.244.0.0/16 (outside the service range 10.0.0.0/24). No masquerading: pods
  # need no way out but to the API server (route_kubernetes_service). host-local keeps its leases in the state dir.
  cat >"${NODE_STATE}/cni/net.d/10-${CNI_NETWORK}.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "${CNI_NETWORK}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${BRIDGE}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${POD_SUBNET}"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "${NODE_STATE}/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": false}
  ]
}
EOF

  # containerd: every path under the state dir (root, state, socket, runc's root, network namespaces), so nodes
  # and the host's own containerd (if any) share nothing but the shims' socket directory (/run/containerd/s, keyed by
  # a hash of socket, namespace and container: a path below the state dir would pass the 108-byte limit of unix
  # socket paths). CDI specs are read from the host's standard dirs
  # and from the node's own dir (a stand-in DRA plugin writes there). NRI is off: it would listen on a host path.
  local runc restrict_oom=false
  runc="$(command -v runc)"
  # Without CAP_SYS_RESOURCE (some VMs and sandboxes drop it from the bounding set even for root) no process may
  # lower its oom_score_adj, and runc fails every pod sandbox the kubelet asks a -998 for with "can't get final
  # child's PID from pipe: EOF". containerd's restrict_oom_score_adj (meant for rootless) then clamps the requested
  # score to containerd's own.
  has_cap 24 || restrict_oom=true
  cat >"${NODE_STATE}/containerd/config.toml" <<EOF
version = 4
root = '${NODE_STATE}/containerd/root'
state = '${NODE_STATE}/containerd/state'
temp = '${NODE_STATE}/containerd/tmp'
disabled_plugins = ['io.containerd.nri.v1.nri']

[plugins.'io.containerd.server.v1.grpc']
  address = '${CONTAINERD_SOCK}'

[plugins.'io.containerd.server.v1.ttrpc']
  address = '${CONTAINERD_SOCK}.ttrpc'

[plugins.'io.containerd.internal.v1.opt']
  path = '${NODE_STATE}/containerd/opt'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$(image_ref pause)'

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi', '${NODE_STATE}/cdi']
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = ${restrict_oom}
  # cgroup v1 hosts here have no hugetlb hierarchy mounted.
  tolerate_missing_hugetlb_controller = true
  disable_hugetlb_controller = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '${runc}'
        Root = '${NODE_STATE}/containerd/runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '${NODE_STATE}/cni/net.d'

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
EOF

  # cgroupfs driver (no systemd here) under a cgroup root of the node's own, so several nodes never share cgroups.
  # failCgroupV1: false: this host mounts cgroup v1 (hybrid), and kubelets from 1.35 on refuse to start there
  # unless told otherwise (KEP-5573, cgroup v1 deprecated); 1.34 only warns, and accepts the field.
  # Eviction and image GC thresholds are lowered/raised so a busy developer disk never evicts the test pods or
  # deletes the images imported here (they cannot be pulled back).
  # nodeLeaseDurationSeconds: the kubelet renews its Lease every quarter of it (2.5s), well inside the control
  # plane's shortened node-monitor grace period (controlplane.sh), so a live node is never counted unreachable.
  cat >"${NODE_STATE}/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${node_ip}
port: ${KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${KUBELET_HEALTHZ_PORT}
tlsCertFile: ${pki}/kubelet-serving.crt
tlsPrivateKeyFile: ${pki}/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${pki}/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://${CONTAINERD_SOCK}
cgroupDriver: cgroupfs
cgroupRoot: ${CGROUP_ROOT}
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeLeaseDurationSeconds: 10
nodeStatusUpdateFrequency: 4s
EOF
}

# The node's cgroup root in every mounted v1 hierarchy (and the v2 one), made before the kubelet starts: it refuses
# a cgroup root that does not exist. A new cpuset needs its CPUs and memory nodes copied from its parent.
make_cgroup_root() {
  local dir
  for dir in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [[ -d "${dir}" && "$(stat -fc %T "${dir}")" == cgroup* ]] || continue
    mkdir -p "${dir%/}${CGROUP_ROOT}"
    if [[ -f "${dir}cpuset.cpus" && "$(basename "${dir}")" == cpuset ]]; then
      cat "${dir}cpuset.cpus" >"${dir%/}${CGROUP_ROOT}/cpuset.cpus"
      cat "${dir}cpuset.mems" >"${dir%/}${CGROUP_ROOT}/cpuset.mems"
    fi
  done
}

# Removes the node's cgroups, deepest first (a cgroup can only be removed once it has no children and no tasks).
remove_cgroup_root() {
  local dir
  for dir in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [[ -d "${dir%/}${CGROUP_ROOT}" ]] || continue
    find "${dir%/}${CGROUP_ROOT}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ ! -d "${dir%/}${CGROUP_ROOT}" ]] || log "could not remove ${dir%/}${CGROUP_ROOT} (tasks left in it?)"
  done
}

# More than one node per host, each with its own kubelet directory at the same path. A kubelet plugin's DaemonSet
# mounts `<kubeletDir>/plugins` and `plugins_registry` from the host, one path for every node, and tells the kubelet
# the path of its socket there, which the kubelet opens. So each node's kubelet and containerd (and with it runc,
# which resolves a pod's hostPath, and the containers) run in a mount namespace of the node's own, in which the
# node's kubelet directory in the state dir is bind-mounted onto NODE_KUBELET_DIR: the kubelet runs with that
# root dir, and a plugin with `driver.kubeletDir: /var/lib/ndra-kubelet` on node-2 mounts node-2's directories.
# Everything else is the host's (`unshare --propagation unchanged`: mounts stay shared with it), except that
# NODE_KUBELET_DIR is a private mount point on the host, so a node's bind onto it (and the kubelet's pod volumes
# below it) stay in that node's namespace. The namespace is pinned to a file in NS_PINS (a private mount too, as
# unshare requires), so it outlives a kubelet or containerd restart (`stop-component`/`start-component`); `down`
# unpins it once the node's processes are gone. docs/local-node.md.
private_mount_point() {
  mkdir -p "$1"
  mountpoint -q "$1" || mount --bind "$1" "$1"
  mount --make-private "$1"
}

node_namespace() {
  command -v unshare >/dev/null && command -v nsenter >/dev/null || die "missing: apt-get install -y util-linux"
  private_mount_point "${NS_PINS}"
  private_mount_point "${NODE_KUBELET_DIR}"
  mkdir -p "${NODE_STATE}/kubelet"
  if [[ -e "${NODE_NS}" ]]; then umount "${NODE_NS}" 2>/dev/null || true; fi
  touch "${NODE_NS}"
  unshare --mount="${NODE_NS}" --propagation unchanged -- mount --bind "${NODE_STATE}/kubelet" "${NODE_KUBELET_DIR}"
}

# Once no process of the node is left: the namespace and its mounts go with its pin.
unpin_node_namespace() {
  if [[ -e "${NODE_NS}" ]]; then
    umount "${NODE_NS}" 2>/dev/null || umount -l "${NODE_NS}" 2>/dev/null || log "could not unpin ${NODE_NS}"
    rm -f "${NODE_NS}"
  fi
  # The last node takes the host's private mount points with it.
  if ! compgen -G "${NS_PINS}/*" >/dev/null; then
    local m
    for m in "${NODE_KUBELET_DIR}" "${NS_PINS}"; do
      if mountpoint -q "${m}"; then umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || true; fi
      rmdir "${m}" 2>/dev/null || true
    done
  fi
}

# The Neuron DRA driver's DaemonSet (like every kubelet plugin's) mounts the kubelet's plugin directories from the
# host at their standard paths, /var/lib/kubelet/plugins and plugins_registry, and registers there. A node's kubelet
# keeps its root dir in the state dir, so one node (node-1 unless NODE_HOST_PLUGINS=0) bind-mounts its two plugin
# directories onto those host paths: a plugin pod's registration socket then appears in the directory the kubelet
# watches, and the endpoint path the plugin reports resolves on the host. Only one node per host can have them;
# the mounts are recorded in the state dir, so `down` unmounts exactly those.
HOST_PLUGIN_DIRS=(plugins plugins_registry)

bind_host_plugin_dirs() {
  [[ "${NODE_HOST_PLUGINS:-1}" == 1 && "${NODE_NAME}" == node-1 ]] || return 0
  local d host
  for d in "${HOST_PLUGIN_DIRS[@]}"; do
    host="/var/lib/kubelet/${d}"
    mkdir -p "${NODE_STATE}/kubelet/${d}"
    if mountpoint -q "${host}" 2>/dev/null; then
      log "${host} is already a mount point (another node or kubelet?): kubelet plugins on ${NODE_NAME} will not register"
      continue
    fi
    [[ -d "${host}" ]] || { mkdir -p "${host}" && echo "${host}" >>"${NODE_STATE}/host-dirs"; }
    mount --bind "${NODE_STATE}/kubelet/${d}" "${host}"
    echo "${host}" >>"${NODE_STATE}/host-mounts"
  done
}

unbind_host_plugin_dirs() {
  local host
  if [[ -f "${NODE_STATE}/host-mounts" ]]; then
    while read -r host; do
      umount "${host}" 2>/dev/null || umount -l "${host}" 2>/dev/null || log "could not unmount ${host}"
    done <"${NODE_STATE}/host-mounts"
  fi
  # Directories this script created on the host go again when empty (deepest first).
  if [[ -f "${NODE_STATE}/host-dirs" ]]; then
    while read -r host; do rmdir "${host}" 2>/dev/null || true; done < <(sort -r "${NODE_STATE}/host-dirs")
    rmdir /var/lib/kubelet 2>/dev/null || true
  fi
}

# ---------------------------------------------------------------------------
# the API server's Service: what kube-proxy would do for it, and nothing else
# ---------------------------------------------------------------------------

# The `kubernetes` Service's address, for the node's pods (the in-cluster config of the plugin and the operator):
# no kube-proxy runs, so a DNAT rule in the node's own namespace sends 10.0.0.1:443 to the API server in the lab, for
# pods on the node's bridge (PREROUTING) and host-network pods (OUTPUT). Nothing changes in the host's namespace.
SERVICE_CHAIN="NDRA-KUBERNETES"

api_port() { sed -E 's/.*:([0-9]+)$/\1/' "${CP_STATE}/apiserver.url"; }

route_kubernetes_service() {
  local cluster_ip port hook
  cluster_ip="$(kubectl_admin -n default get service kubernetes -o jsonpath='{.spec.clusterIP}')"
  port="$(api_port)"
  [[ -n "${cluster_ip}" && "${port}" =~ ^[0-9]+$ ]] || die "cannot read the kubernetes Service or the API port"
  node_exec iptables -t nat -N "${SERVICE_CHAIN}" 2>/dev/null || node_exec iptables -t nat -F "${SERVICE_CHAIN}"
  node_exec iptables -t nat -A "${SERVICE_CHAIN}" -d "${cluster_ip}/32" -p tcp --dport 443 \
    -j DNAT --to-destination "${LAB_ADDRESS}:${port}"
  for hook in PREROUTING OUTPUT; do
    node_exec iptables -t nat -C "${hook}" -j "${SERVICE_CHAIN}" 2>/dev/null ||
      node_exec iptables -t nat -A "${hook}" -j "${SERVICE_CHAIN}"
  done
}

image_ref() { "${REPO_ROOT}/hack/images.sh" ref "$1"; }

containerd_ready() { ctr_node version >/dev/null 2>&1; }

kubelet_healthy() {
  node_exec curl -fsS --max-time 2 "http://127.0.0.1:${KUBELET_HEALTHZ_PORT}/healthz" >/dev/null 2>&1
}

node_ready() {
  [[ "$(kubectl_admin get node "${NODE_NAME}" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# With no node-lifecycle controller in this control plane (see controlplane.sh), nothing removes the not-ready
# taint that admission (TaintNodesByCondition) puts on every new Node; the simulator clears it for its nodes, this
# script for the real one once the kubelet reports Ready. Nothing taints the node again if its kubelet stops.
clear_not_ready_taint() {
  local taints
  taints="$(kubectl_admin get node "${NODE_NAME}" -o jsonpath='{.spec.taints[*].key}')"
  [[ " ${taints} " == *" node.kubernetes.io/not-ready "* ]] || return 0
  kubectl_admin taint node "${NODE_NAME}" node.kubernetes.io/not-ready- >/dev/null
}

# The API server calls kubelets (logs, exec, port-forward) as kube-apiserver-kubelet-client (controlplane.sh's
# certificate); the kubelet asks the API server whether that user may, so it gets the built-in role for exactly
# that, as kubeadm does. Created with the first node; harmless to the simulated fleet.
grant_apiserver_kubelet_access() {
  kubectl_admin create clusterrolebinding kube-apiserver-kubelet-client --clusterrole=system:kubelet-api-admin \
    --user=kube-apiserver-kubelet-client --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
}

cmd_up() {
  set_node "${1:-}"
  check_host
  "${CONTROLPLANE_SH}" status >/dev/null || die "the control plane is not running: run hack/controlplane.sh up"
  cmd_build

  lock_node
  if live_pid kubelet >/dev/null && live_pid containerd >/dev/null && node_ready; then
    log "${NODE_NAME} is already running, reusing it"
    route_kubernetes_service
    # Images of changed sources (the operator after an edit, say) are built and imported again; unchanged ones
    # are imported as they are, which takes a second each.
    import_images
    return 0
  fi
  if [[ -d "${NODE_STATE}" ]]; then
    log "removing stale ${NODE_STATE}"
    teardown
  fi
  # A Node left from an earlier run would look Ready before this kubelet has said anything.
  kubectl_admin delete node "${NODE_NAME}" --ignore-not-found >/dev/null
  local other
  for other in "${CP_STATE}"/nodes/*/; do
    [[ -d "${other}" && "$(basename "${other}")" != "${NODE_NAME}" ]] || continue
    [[ "$(node_index "$(basename "${other}")")" != "${NODE_INDEX}" ]] ||
      die "${NODE_NAME} would share bridge and pod subnet with $(basename "${other}"): give it another number"
  done
  local start=${SECONDS}
  mkdir -p "${NODE_STATE}/containerd"
  grant_apiserver_kubelet_access

  write_configs
  make_cgroup_root
  bind_host_plugin_dirs
  node_namespace
  node_network
  route_kubernetes_service

  start containerd "${CONTAINERD_BIN}/containerd" --config "${NODE_STATE}/containerd/config.toml"
  WAIT_COMPONENT=containerd wait_until "containerd" containerd_ready
  # Builds what changed, then imports every image a node runs: containerd's state, and so its images, go with the
  # node at `down`.
  import_images

  local labels="${NODE_INSTANCE_TYPE:+node.kubernetes.io/instance-type=${NODE_INSTANCE_TYPE}}"
  labels="${labels}${labels:+${NODE_LABELS:+,}}${NODE_LABELS:-}"
  start kubelet "$(kubelet_bin)" \
    --config="${NODE_STATE}/kubelet.yaml" \
    --kubeconfig="${NODE_STATE}/kubelet.kubeconfig" \
    --root-dir="${NODE_KUBELET_DIR}" \
    --cert-dir="${NODE_STATE}/pki" \
    --hostname-override="${NODE_NAME}" \
    --node-ip="${NODE_ADDRESS}" \
    --node-labels="${labels}" \
    --v=1
  WAIT_COMPONENT=kubelet wait_until "kubelet /healthz" kubelet_healthy
  WAIT_COMPONENT=kubelet wait_until "Node ${NODE_NAME} Ready" node_ready
  clear_not_ready_taint
  log "${NODE_NAME} Ready in $((SECONDS - start))s (kubelet $(kube_version) on ${NODE_ADDRESS}:${KUBELET_PORT}," \
    "containerd ${CONTAINERD_VERSION}, pods in ${POD_SUBNET}; logs in ${NODE_STATE}/*.log)"
}

# NODE_IMAGES (names, space-separated): only those, e.g. without the operator image, whose static build is the
# slowest step of a first `up`; default every image a node runs.
import_images() {
  # shellcheck disable=SC2086 # a list of names
  "${REPO_ROOT}/hack/images.sh" import "${CONTAINERD_BIN}/ctr" "${CONTAINERD_SOCK}" ${NODE_IMAGES:-}
}

lock_node() {
  mkdir -p "${CP_STATE}/nodes"
  exec 7>"${CP_STATE}/nodes/${NODE_NAME}.lock"
  flock 7
}


# Mount points at or below $1, deepest first (from /proc/self/mountinfo, whose octal escapes are decoded).
mounts_under() {
  python3 - "$1" <<'EOF'
import re, sys
root = sys.argv[1].rstrip("/")
points = set()
for line in open("/proc/self/mountinfo"):
    point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
    if point == root or point.startswith(root + "/"):
        points.add(point)
print("\n".join(sorted(points, key=len, reverse=True)))
EOF
}

# Everything a node leaves behind, in an order that needs no component's cooperation: kill the containers (runc
# knows them all, under its root in the state dir), stop the kubelet and containerd and the shims, unmount every
# mount below the state dir (container root filesystems, network namespaces, pod volumes), delete the bridge, the
# CNI result cache entries and the cgroups, then the files. rm never runs while anything below is still mounted.
teardown() {
  local pid id
  if pid="$(live_pid kubelet)"; then stop_pid "${pid}"; fi
  local runc_root="${NODE_STATE}/containerd/runc"
  if [[ -d "${runc_root}" ]] && command -v runc >/dev/null; then
    # One directory per containerd namespace, one per container in it.
    for id in "${runc_root}"/*/*/; do
      [[ -d "${id}" ]] || continue
      id="${id%/}"
      runc --root "${id%/*}" kill --all "${id##*/}" KILL 2>/dev/null || true
      runc --root "${id%/*}" delete --force "${id##*/}" 2>/dev/null || true
    done
  fi
  if pid="$(live_pid containerd)"; then stop_pid "${pid}"; fi
  # Shims run in sessions of their own; each names our containerd's socket on its command line.
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*${CONTAINERD_SOCK}" || true); do
    kill -KILL "${pid}" 2>/dev/null || true
  done
  unbind_host_plugin_dirs
  unpin_node_namespace
  local m mounts
  mounts="$(mounts_under "${NODE_STATE}")" || die "cannot read the mount table"
  while read -r m; do
    [[ -n "${m}" ]] || continue
    umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || log "could not unmount ${m}"
  done <<<"${mounts}"
  remove_node_network
  # libcni caches each attachment's result in /var/lib/cni/results (not configurable through containerd), named by
  # network and sandbox: the node's network, and containerd's loopback network for each of its sandboxes.
  rm -f /var/lib/cni/results/"${CNI_NETWORK}"-* 2>/dev/null || true
  for id in "${NODE_STATE}"/containerd/root/io.containerd.grpc.v1.cri/sandboxes/*/; do
    [[ -d "${id}" ]] || continue
    id="${id%/}"
    rm -f /var/lib/cni/results/cni-loopback-"${id##*/}"-* 2>/dev/null || true
  done
  remove_cgroup_root
  mounts="$(mounts_under "${NODE_STATE}")" || die "cannot read the mount table"
  [[ -z "${mounts}" ]] || die "still mounted below ${NODE_STATE}, not removing it: ${mounts//$'\n'/ }"
  rm -rf "${NODE_STATE}"
}

cmd_down() {
  local names=("$@") n
  if ((${#names[@]} == 0)); then
    [[ -d "${CP_STATE}/nodes" ]] || return 0
    mapfile -t names < <(find "${CP_STATE}/nodes" -mindepth 1 -maxdepth 1 -type d -printf '%f\n')
  fi
  for n in "${names[@]}"; do
    (
      set_node "${n}"
      lock_node
      teardown
      # The Node object goes too, so its pods do not wait for a kubelet that never comes back. Best effort: the
      # control plane may already be gone.
      if [[ -f "${CP_STATE}/kubeconfig" ]] && "${CONTROLPLANE_SH}" status >/dev/null 2>&1; then
        kubectl_admin delete node "${NODE_NAME}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
      fi
      rm -f "${CP_STATE}/nodes/${NODE_NAME}.lock"
      log "${NODE_NAME} stopped"
    )
  done
  rmdir "${CP_STATE}/nodes" "${CP_STATE}" 2>/dev/null || true
  # The kubelet's device manager listens on /var/lib/kubelet/device-plugins/kubelet.sock whatever its root dir (so
  # local nodes share that path; nothing here uses device plugins). Removed once no kubelet is left on the host.
  if [[ ! -d "${CP_STATE}/nodes" ]] && ! pgrep -x kubelet >/dev/null; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
  fi
}

cmd_status() {
  set_node "${1:-}"
  local ok=true c
  for c in containerd kubelet; do
    if live_pid "${c}" >/dev/null; then echo "${c}: running"; else echo "${c}: not running"; ok=false; fi
  done
  if node_ready; then echo "node ${NODE_NAME}: Ready"; else echo "node ${NODE_NAME}: not Ready"; ok=false; fi
  ${ok}
}

component() {
  case "$1" in
    kubelet | containerd) ;;
    *) die "unknown node component '$1' (kubelet, containerd)" ;;
  esac
}

cmd_stop_component() {
  component "$1"
  set_node "${2:-}"
  [[ -d "${NODE_STATE}" ]] || die "${NODE_NAME} is not running: run '$0 up ${NODE_NAME}'"
  lock_node
  local pid
  pid="$(live_pid "$1")" || die "$1 of ${NODE_NAME} is not running"
  stop_pid "${pid}"
  log "$1 of ${NODE_NAME} stopped"
}

# As a power loss does: SIGKILL, no chance to clean up (containers and their shims keep running, as nothing on a
# dead host would tell anyone otherwise; the kubelet's next start finds them).
cmd_kill_component() {
  component "$1"
  set_node "${2:-}"
  [[ -d "${NODE_STATE}" ]] || die "${NODE_NAME} is not running: run '$0 up ${NODE_NAME}'"
  lock_node
  local pid
  pid="$(live_pid "$1")" || die "$1 of ${NODE_NAME} is not running"
  kill -KILL "${pid}"
  while kill -0 "${pid}" 2>/dev/null; do sleep 0.1; done
  log "$1 of ${NODE_NAME} killed"
}

cmd_start_component() {
  component "$1"
  set_node "${2:-}"
  [[ -d "${NODE_STATE}" ]] || die "${NODE_NAME} is not running: run '$0 up ${NODE_NAME}'"
  lock_node
  ! live_pid "$1" >/dev/null || die "$1 of ${NODE_NAME} is already running"
  [[ -f "${NODE_STATE}/$1.args" ]] || die "$1 of ${NODE_NAME} was never started: run '$0 up ${NODE_NAME}'"
  local -a args
  mapfile -d '' args <"${NODE_STATE}/$1.args"
  start "$1" "${args[@]}"
  case "$1" in
    containerd) WAIT_COMPONENT=containerd wait_until "containerd" containerd_ready ;;
    kubelet) WAIT_COMPONENT=kubelet wait_until "kubelet /healthz" kubelet_healthy ;;
  esac
  log "$1 of ${NODE_NAME} started"
}

main() {
  local cmd="${1:-}"
  shift || true
  case "${cmd}" in
    build) cmd_build "$@" ;;
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    stop-component) cmd_stop_component "${1:-}" "${2:-}" ;;
    start-component) cmd_start_component "${1:-}" "${2:-}" ;;
    kill-component) cmd_kill_component "${1:-}" "${2:-}" ;;
    ctr)
      local name=node-1
      if [[ "${1:-}" =~ -[0-9]+$ ]]; then name="$1"; shift; fi
      set_node "${name}"
      ctr_node "$@"
      ;;
    *)
      echo "usage: $0 build|up [NAME]|down [NAME]|status [NAME]|stop-component C [NAME]|start-component C [NAME]" \
        "|ctr [NAME] ARGS" >&2
      exit 2
      ;;
  esac
}

# On one line so bash has read everything before running it (editing this file while it runs is harmless).
main "$@"; exit
