#!/usr/bin/env bash
# Proves the stand-in Neuron kubelet plugin (docs/standin-plugin.md) on a real node of the local control plane:
#   hack/node-plugin-check.sh [NODE]     (default node-1; needs `NODES=1 hack/controlplane.sh up` first)
# Runs the operator (target/debug/neuron-dra-operator, built here if missing) against the control plane, applies a
# NeuronDRAConfig whose plugin image is the stand-in (imported into the node's containerd at `up`), and checks:
# the operator's DaemonSet runs the plugin on NODE, the kubelet registers driver neuron.aws.com, the node's
# ResourceSlice carries the devices the simulator publishes for its type, and a pod claiming 4 devices through the
# operator's ResourceClaimTemplate runs with exactly those devices (/dev/neuronN) and the Neuron runtime's
# environment. Then deleting the pod removes its CDI spec. Everything it made is deleted at the end.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${REPO_ROOT}/target/controlplane"
export KUBECONFIG="${STATE}/kubeconfig"
NODE="${1:-node-1}"
NS="plugin-check"
CONFIG="standin"
DRIVER_NS="neuron-dra-driver"
OPERATOR="${REPO_ROOT}/target/debug/neuron-dra-operator"
IMAGE="$("${REPO_ROOT}/hack/images.sh" ref neuron-plugin)"
BUSYBOX="$("${REPO_ROOT}/hack/images.sh" ref busybox)"
KUBELET_LOG="${STATE}/nodes/${NODE}/kubelet.log"
OPERATOR_LOG="${STATE}/plugin-check-operator.log"
OPERATOR_PID=""

log() { echo "node-plugin-check: $*" >&2; }
fail() {
  log "FAILED: $*"
  kubectl -n "${DRIVER_NS}" get pods -o wide >&2 || true
  kubectl -n "${DRIVER_NS}" logs "daemonset/neuron-dra-${CONFIG}" --tail=30 >&2 || true
  kubectl -n "${NS}" describe pods >&2 || true
  kubectl get resourceclaims -A >&2 || true
  exit 1
}
cleanup() {
  kubectl delete namespace "${NS}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl delete neurondraconfig "${CONFIG}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  # The operator removes its objects (finalizer) before it stops.
  kubectl wait --for=delete "neurondraconfig/${CONFIG}" --timeout=60s >/dev/null 2>&1 || true
  [[ -z "${OPERATOR_PID}" ]] || kill "${OPERATOR_PID}" 2>/dev/null || true
}
trap cleanup EXIT

kubectl get node "${NODE}" >/dev/null || fail "no Node ${NODE} (NODES=1 hack/controlplane.sh up)"
[[ -x "${OPERATOR}" ]] || (cd "${REPO_ROOT}" && cargo build --locked --bin neuron-dra-operator)

# The CRD and a local operator (no leader election), as the tests' harness (src/devtools/harness) runs it.
kubectl apply --server-side --force-conflicts -f "${REPO_ROOT}/crds" >/dev/null
kubectl wait --for=condition=Established crd/neurondraconfigs.neurondra.io --timeout=30s >/dev/null
RUST_LOG=info "${OPERATOR}" run --leader-elect=false --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
  >"${OPERATOR_LOG}" 2>&1 &
OPERATOR_PID=$!
log "operator running (pid ${OPERATOR_PID}, log ${OPERATOR_LOG})"

kubectl wait --for=delete "namespace/${NS}" --timeout=120s >/dev/null 2>&1 || true
kubectl create namespace "${NS}" --dry-run=client -o yaml | kubectl apply -f - >/dev/null

# A slice left by an earlier plugin (slices outlive their plugin; the Node owns them) must not pass for this one's.
kubectl delete resourceslices --field-selector "spec.nodeName=${NODE},spec.driver=neuron.aws.com" >/dev/null

start=${SECONDS}
kubectl apply -f - >/dev/null <<EOF
apiVersion: neurondra.io/v1alpha1
kind: NeuronDRAConfig
metadata: {name: ${CONFIG}}
spec:
  nodeSelector:
    matchLabels: {node.kubernetes.io/instance-type: trn2.48xlarge}
  driver:
    image: ${IMAGE}
    imagePullPolicy: IfNotPresent
  templates:
    namespaces: [${NS}]
  profiles:
  - name: finetune
    training: {instanceType: trn2.48xlarge, devices: 4}
EOF

for _ in $(seq 120); do
  kubectl -n "${DRIVER_NS}" get pods -l app.kubernetes.io/name=neuron-dra-driver -o name 2>/dev/null | grep -q . && break
  sleep 1
done
kubectl -n "${DRIVER_NS}" wait --for=condition=Ready pod -l app.kubernetes.io/name=neuron-dra-driver --timeout=120s \
  >/dev/null || fail "plugin pod not Ready"
log "plugin pod Ready in $((SECONDS - start))s"
plugin_ready=${SECONDS}
kubectl -n "${DRIVER_NS}" get pods -o wide

for _ in $(seq 60); do
  slice="$(kubectl get resourceslices --field-selector "spec.nodeName=${NODE},spec.driver=neuron.aws.com" -o name)"
  [[ -z "${slice}" ]] || break
  sleep 1
done
[[ -n "${slice}" ]] || fail "no ResourceSlice of neuron.aws.com for ${NODE}"
devices="$(kubectl get "${slice}" -o jsonpath='{range .spec.devices[*]}{.name}{" "}{end}')"
count="$(wc -w <<<"${devices}")"
[[ "${count}" == 16 ]] || fail "${slice}: ${count} devices (${devices}), want 16"
log "${slice}: ${count} devices: ${devices}"
# The same devices and attributes as the simulator's (draDriverVersion is the image tag in both).
# (The command reads no cluster; the control plane's kubeconfig only satisfies the client it makes first.)
expected="$("${REPO_ROOT}/target/debug/neuron-dra-devtools" simulate devices --instance-type trn2.48xlarge)" ||
  fail "neuron-dra-devtools simulate devices (cargo build --features devtools --bin neuron-dra-devtools)"
if [[ -n "${expected}" ]]; then
  diff <(jq -S '.["trn2.48xlarge"] | map({name, attributes}) | sort_by(.name)' <<<"${expected}") \
    <(kubectl get "${slice}" -o json | jq -S '.spec.devices | map({name, attributes}) | sort_by(.name)') \
    || fail "the slice's devices differ from the simulator's"
  log "devices and attributes equal the simulator's"
fi
registered="$(grep -o 'RegisterPlugin started" plugin={"SocketPath":"[^"]*neuron.aws.com-reg.sock"' \
  "${KUBELET_LOG}" | tail -1)"
[[ -n "${registered}" ]] || fail "the kubelet log does not show neuron.aws.com registering"
log "kubelet: ${registered}"

template="$(kubectl -n "${NS}" get resourceclaimtemplates -o jsonpath='{.items[0].metadata.name}')"
[[ -n "${template}" ]] || fail "the operator wrote no ResourceClaimTemplate in ${NS}"
kubectl -n "${NS}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  nodeSelector: {kubernetes.io/hostname: ${NODE}}
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - {name: neurons, resourceClaimTemplateName: ${template}}
  containers:
  - name: main
    image: ${BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      claims: [{name: neurons}]
EOF
kubectl -n "${NS}" wait --for=condition=Ready pod/trainer --timeout=120s >/dev/null || fail "pod not Ready"
log "pod trainer Running with claim template ${template}"
claim="$(kubectl -n "${NS}" get pod trainer -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}')"
allocated="$(kubectl -n "${NS}" get resourceclaim "${claim}" \
  -o jsonpath='{range .status.allocation.devices.results[*]}{.device}{"\n"}{end}' | sed 's/neuron-device-//' | sort -n)"
want_dev="$(sed 's|^|/dev/neuron|' <<<"${allocated}" | sort)"
have_dev="$(kubectl -n "${NS}" exec trainer -- sh -c 'ls /dev/neuron*' | sort)"
log "allocated: $(tr '\n' ' ' <<<"${allocated}"); in the container: $(tr '\n' ' ' <<<"${have_dev}")"
[[ "${want_dev}" == "${have_dev}" ]] || fail "container devices '${have_dev}' != allocated '${want_dev}'"
env_="$(kubectl -n "${NS}" exec trainer -- env | grep '^NEURON' | sort)"
log "environment: $(tr '\n' ' ' <<<"${env_}")"
grep -q '^NEURON_RT_VISIBLE_CORES=' <<<"${env_}" || fail "no NEURON_RT_VISIBLE_CORES"
uid="$(kubectl -n "${NS}" get resourceclaim "${claim}" -o jsonpath='{.metadata.uid}')"
spec="/var/run/cdi/neuron.aws.com-${uid}.json"
[[ -f "${spec}" ]] || fail "no CDI spec ${spec}"
log "CDI spec: $(jq -c . "${spec}")"
kubectl -n "${NS}" delete pod trainer --wait=true --timeout=60s >/dev/null
for _ in $(seq 30); do [[ -f "${spec}" ]] || break; sleep 1; done
[[ ! -f "${spec}" ]] || fail "CDI spec ${spec} left after the pod went"
log "CDI spec ${spec} removed with the pod"
# The DaemonSet's liveness probe (gRPC, HEALTHCHECK_PORT, service `liveness`; 30 s delay, 3 failures 10 s apart):
# past the point where it would have restarted the plugin, it must not have.
wait_for=$((plugin_ready + 70 - SECONDS))
if ((wait_for > 0)); then log "waiting ${wait_for}s for the liveness probe to have run"; sleep "${wait_for}"; fi
plugin_pod="$(kubectl -n "${DRIVER_NS}" get pods -l app.kubernetes.io/name=neuron-dra-driver \
  -o jsonpath='{.items[0].metadata.name}')"
restarts="$(kubectl -n "${DRIVER_NS}" get pod "${plugin_pod}" -o jsonpath='{.status.containerStatuses[0].restartCount}')"
unhealthy="$(kubectl -n "${DRIVER_NS}" get events -o name \
  --field-selector "reason=Unhealthy,involvedObject.name=${plugin_pod}")"
[[ "${restarts}" == 0 && -z "${unhealthy}" ]] || fail "liveness: ${restarts} restarts, events: ${unhealthy}"
log "liveness probe passing: 0 restarts, no Unhealthy events after $((SECONDS - plugin_ready))s"
log "OK in $((SECONDS - start))s"
