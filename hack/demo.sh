#!/usr/bin/env bash
# `make demo`: the operator's main job on one machine. Starts the local control plane with one real node (kubelet,
# containerd, runc; building them the first time), simulates a small mixed Trainium fleet beside it, runs the
# operator under its shipped RBAC (with the stand-in plugin's image allowed by an overlay, hack/demo-install),
# applies the mixed sample, breaks one device, shows what a platform engineer would look at, and runs a pod on the
# real node with the devices the scheduler allocated to it. Leaves everything running; `make demo-down` stops it.
#
#   hack/demo.sh        run the demo (safe to run again; DEMO_NODES=0: no real node, the simulated fleet only)
#   hack/demo.sh down   undo it: stop the operator and the simulated kubelet, and stop the control plane and the
#                       node if the demo started them; on a control plane that was already running (a test phase's,
#                       tests/real_node_demo.rs), remove only what the demo added to it
#
# A running control plane is reused at its own release; otherwise KUBE_VERSION (default the oldest supported).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${ROOT}/target/demo"
# DEMO_PROFILE=debug reuses a debug build (faster to build, slower to run); `down` uses the build the demo ran.
PROFILE="${DEMO_PROFILE:-$(cat "${STATE}/profile" 2>/dev/null || echo release)}"
BIN="${ROOT}/target/${PROFILE}/neuron-dra-operator"
DEVTOOLS="${ROOT}/target/${PROFILE}/neuron-dra-devtools"
export KUBECONFIG="${ROOT}/target/controlplane/kubeconfig"
CONFIG=trainium
FAULTY_NODE=demo-trn2-1
NODES="${DEMO_NODES:-1}"
REAL_NODE="node-1"
NAMESPACES=(team-a team-b ml-research)
FLEETS=(demo-trn2 demo-trn1 demo-us)
# What the demo started itself, so that `down` stops only that (files in ${STATE}).
STARTED_CONTROLPLANE="${STATE}/started-controlplane"
STARTED_NODE="${STATE}/started-node"
# The sample's driver namespace, which the operator creates and, being shared, never deletes.
DRIVER_NAMESPACE=neuron-dra-driver
CREATED_DRIVER_NAMESPACE="${STATE}/created-driver-namespace"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

stop_demo_processes() {
  for name in operator kubelet; do
    if [[ -f "${STATE}/${name}.pid" ]]; then
      kill "$(cat "${STATE}/${name}.pid")" 2>/dev/null || true
      rm -f "${STATE}/${name}.pid"
    fi
  done
}

# The demo's objects on a control plane it did not start. The namespaces first, while the plugin still runs to
# release their pods' devices (a kubelet cannot finish a pod whose driver is gone) and the simulated kubelet to
# confirm the rest; then the config, while the operator runs to release its finalizer and remove what it rendered;
# then the simulated fleet, the processes and the rest the demo made.
remove_demo_objects() {
  kubectl delete namespace "${NAMESPACES[@]}" --ignore-not-found --wait=true --timeout=120s >/dev/null
  kubectl delete ndc "${CONFIG}" --ignore-not-found --wait=true --timeout=120s >/dev/null
  if [[ -f "${CREATED_DRIVER_NAMESPACE}" ]]; then
    kubectl delete namespace "${DRIVER_NAMESPACE}" --ignore-not-found --wait=true --timeout=120s >/dev/null
  fi
  local fleet
  for fleet in "${FLEETS[@]}"; do "${DEVTOOLS}" simulate clear --prefix "${fleet}" >/dev/null; done
  stop_demo_processes
  kubectl delete clusterrolebinding demo-metrics-reader --ignore-not-found >/dev/null
  kubectl delete serviceaccount -n neuron-dra-operator-system demo-metrics-reader --ignore-not-found >/dev/null
}

if [[ "${1:-}" == "down" ]]; then
  if [[ -f "${STARTED_CONTROLPLANE}" ]] || ! "${ROOT}/hack/controlplane.sh" status >/dev/null 2>&1; then
    stop_demo_processes
    "${ROOT}/hack/controlplane.sh" down
  else
    remove_demo_objects
    [[ ! -f "${STARTED_NODE}" ]] || "${ROOT}/hack/node.sh" down "${REAL_NODE}"
  fi
  rm -rf "${STATE}"
  exit 0
fi

mkdir -p "${STATE}"
echo "${PROFILE}" >"${STATE}/profile"
stop_demo_processes

say "Building the operator and its dev tools (cargo build --profile ${PROFILE})"
(cd "${ROOT}" && cargo build --profile "${PROFILE/debug/dev}" --locked --quiet --features devtools)

say "Starting the local control plane and ${NODES} real node(s) (the first run builds Kubernetes, containerd and the images)"
if "${ROOT}/hack/controlplane.sh" status >/dev/null 2>&1; then
  # Reused at its own release (a running 1.37 control plane is not replaced by the default 1.34).
  KUBE_VERSION="$(cat "${ROOT}/target/controlplane/version")"
  export KUBE_VERSION
  # A node another run started (its state dir exists) is not the demo's to stop, even while it is briefly not Ready
  # (a kubelet just restarted reports NotReady for a moment).
  if ((NODES > 0)) && [[ ! -f "${STARTED_NODE}" && ! -d "${ROOT}/target/controlplane/nodes/${REAL_NODE}" ]]; then
    touch "${STARTED_NODE}"
  fi
else
  touch "${STARTED_CONTROLPLANE}"
fi
NODES="${NODES}" "${ROOT}/hack/controlplane.sh" up

say "Installing the CRD and the operator's RBAC"
kubectl apply --server-side -f "${ROOT}/crds/neurondra.io_neurondraconfigs.yaml" >/dev/null
kubectl wait --for=condition=Established crd/neurondraconfigs.neurondra.io --timeout=60s >/dev/null
# Discovery lags a moment behind Established on a fresh API server.
for _ in $(seq 120); do kubectl get ndc >/dev/null 2>&1 && break; sleep 0.5; done
kubectl create namespace neuron-dra-operator-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# config/rbac with the stand-in plugin's repository in the fences' allow-list (hack/demo-install/kustomization.yaml).
kubectl apply -k "${ROOT}/hack/demo-install" >/dev/null

say "Simulating a fleet: 4 trn2.48xlarge, 2 trn1.32xlarge, one UltraServer of 4 trn2u.48xlarge"
"${DEVTOOLS}" simulate fleet --count 4 --instance-type trn2.48xlarge --prefix demo-trn2
"${DEVTOOLS}" simulate fleet --count 2 --instance-type trn1.32xlarge --prefix demo-trn1
"${DEVTOOLS}" simulate fleet --count 4 --instance-type trn2u.48xlarge --prefix demo-us
"${DEVTOOLS}" simulate fault clear --node "${FAULTY_NODE}" >/dev/null
nohup "${DEVTOOLS}" simulate kubelet >"${STATE}/kubelet.log" 2>&1 &
echo $! >"${STATE}/kubelet.pid"

say "Running the operator as its ServiceAccount (token from the TokenRequest API)"
server="$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')"
ca="$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
token="$(kubectl create token neuron-dra-operator -n neuron-dra-operator-system --duration=24h)"
cat >"${STATE}/operator.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "${server}", certificate-authority-data: "${ca}"}}]
users: [{name: operator, user: {token: "${token}"}}]
contexts: [{name: operator, context: {cluster: local, user: operator}}]
current-context: operator
EOF
# Port 0: the kernel picks free ports and the operator logs the addresses it bound.
KUBECONFIG="${STATE}/operator.kubeconfig" nohup "${BIN}" run --metrics-bind-address 127.0.0.1:0 \
  --health-probe-bind-address 127.0.0.1:0 --lease-namespace neuron-dra-operator-system >"${STATE}/operator.log" 2>&1 &
echo $! >"${STATE}/operator.pid"
bound_port() { sed -n "/serving \/$1/s/.*address=[0-9.]*:\([0-9]*\).*/\1/p" "${STATE}/operator.log" | head -1; }
for _ in $(seq 100); do
  metrics_port="$(bound_port metrics)" probe_port="$(bound_port healthz)"
  [[ -n "${metrics_port}" && -n "${probe_port}" ]] && break
  sleep 0.1
done
[[ -n "${metrics_port}" && -n "${probe_port}" ]] || { tail "${STATE}/operator.log"; exit 1; }
# /metrics is HTTPS for callers allowed `get /metrics`: a ServiceAccount bound to the metrics-reader ClusterRole.
kubectl -n neuron-dra-operator-system create serviceaccount demo-metrics-reader --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create clusterrolebinding demo-metrics-reader --clusterrole=neuron-dra-operator-metrics-reader \
  --serviceaccount=neuron-dra-operator-system:demo-metrics-reader --dry-run=client -o yaml | kubectl apply -f - >/dev/null
echo "operator pid $(cat "${STATE}/operator.pid"), log ${STATE}/operator.log, probes on http://127.0.0.1:${probe_port}/readyz"
echo "metrics: curl -sk -H \"Authorization: Bearer \$(kubectl create token demo-metrics-reader -n neuron-dra-operator-system)\" https://127.0.0.1:${metrics_port}/metrics"

say "Applying samples/mixed.yaml (templates for team-a, team-b and every namespace labelled neurondra.io/templates=enabled)"
for ns in team-a team-b ml-research; do
  kubectl create namespace "${ns}" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
done
kubectl label namespace ml-research neurondra.io/templates=enabled --overwrite >/dev/null
if [[ ! -f "${CREATED_DRIVER_NAMESPACE}" ]] && ! kubectl get namespace "${DRIVER_NAMESPACE}" >/dev/null 2>&1; then
  touch "${CREATED_DRIVER_NAMESPACE}"
fi
kubectl apply -f "${ROOT}/samples/mixed.yaml"
if ((NODES > 0)); then
  # No registry is reachable here: the real node runs the stand-in plugin (docs/standin-plugin.md), built and
  # imported by hack/node.sh; the simulated nodes' kubelet plays whatever image the DaemonSet names.
  plugin="$("${ROOT}/hack/images.sh" ref neuron-plugin)"
  echo "driver.image -> ${plugin} (the stand-in plugin; AWS's image cannot be pulled here)"
  kubectl patch "ndc/${CONFIG}" --type merge -p "{\"spec\":{\"driver\":{\"image\":\"${plugin}\"}}}" >/dev/null
fi
kubectl wait --for=condition=Ready "ndc/${CONFIG}" --timeout=180s

say "Injecting a fault: a NoExecute taint on one device of ${FAULTY_NODE}"
"${DEVTOOLS}" simulate fault taint --node "${FAULTY_NODE}" --effect NoExecute
kubectl wait --for=jsonpath='{.status.devices.unhealthy}'=1 "ndc/${CONFIG}" --timeout=60s >/dev/null

say "kubectl get ndc"
kubectl get ndc

say "The generated ResourceClaimTemplates"
kubectl get resourceclaimtemplates -A -l app.kubernetes.io/managed-by=neuron-dra-operator

say "Device health in the status"
kubectl get ndc "${CONFIG}" -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}){"\n"}{end}'
echo "unhealthy devices:"
kubectl get ndc "${CONFIG}" -o jsonpath='{range .status.unhealthyDevices[*]}  {.node}/{.device}: {.reason} ({.effect}){"\n"}{end}'

say "A pod that uses a template: all an ML engineer writes (8 connected devices with their EFAs, LNC 2)"
pod="$(cat <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: prefill-0
  namespace: team-a
spec:
  containers:
  - name: prefill
    image: public.ecr.aws/neuron/pytorch-inference-neuronx:2.8.0-neuronx-py311-sdk2.26.0-ubuntu22.04
    command: ["python", "serve.py", "--role=prefill"]
    resources:
      claims:
      - name: neurons
  resourceClaims:
  - name: neurons
    resourceClaimTemplateName: serve-prefill
EOF
)"
echo "${pod}"
kubectl delete pod -n team-a prefill-0 --ignore-not-found --wait=true >/dev/null
echo "${pod}" | kubectl apply -f -
kubectl wait -n team-a --for=condition=PodScheduled pod/prefill-0 --timeout=60s >/dev/null

say "What kube-scheduler allocated to it"
node="$(kubectl get pod -n team-a prefill-0 -o jsonpath='{.spec.nodeName}')"
claim="$(kubectl get pod -n team-a prefill-0 -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}')"
echo "pod team-a/prefill-0 on node ${node}, claim ${claim}"
kubectl get resourceclaim -n team-a "${claim}" -o json >"${STATE}/claim.json"
kubectl get resourceslices --field-selector "spec.nodeName=${node}" -o json >"${STATE}/slices.json"
python3 - "${STATE}/claim.json" "${STATE}/slices.json" <<'PY'
import json, sys
claim, slices = (json.load(open(path)) for path in sys.argv[1:3])
devices = {(s["spec"]["driver"], d["name"]): d.get("attributes", {}) for s in slices["items"] for d in s["spec"]["devices"]}
print(f"{'request':<10}{'driver':<16}{'device':<20}{'devicegroup8_id':<20}EFA (devicegroup1_id)")
for r in claim["status"]["allocation"]["devices"]["results"]:
    attributes = devices[(r["driver"], r["device"])]
    value = lambda key: next(iter(attributes.get(key, {}).values()), "-")
    print(f"{r['request']:<10}{r['driver']:<16}{r['device']:<20}{value('resource.aws.com/devicegroup8_id'):<20}"
          f"{value('resource.aws.com/devicegroup1_id')}")
for c in claim["status"]["allocation"]["devices"].get("config", []):
    print("config:", json.dumps(c["opaque"]["parameters"]))
PY

if ((NODES > 0)); then
  say "The same on the real node ${REAL_NODE}: a pod on chat-128k (8 devices, LNC 1), in a container"
  kubectl delete pod -n team-b chat-0 --ignore-not-found --wait=true >/dev/null
  kubectl apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: chat-0, namespace: team-b}
spec:
  nodeSelector: {kubernetes.io/hostname: ${REAL_NODE}}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $("${ROOT}/hack/images.sh" ref busybox)
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "ls /dev | grep ^neuron; env | grep ^NEURON_ | sort; exec sleep 3600"]
    resources: {claims: [{name: neurons}]}
  resourceClaims:
  - {name: neurons, resourceClaimTemplateName: chat-128k}
EOF
  kubectl wait -n team-b --for=condition=Ready pod/chat-0 --timeout=120s >/dev/null
  claim="$(kubectl get pod -n team-b chat-0 -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}')"
  echo "pod team-b/chat-0 Running on ${REAL_NODE}, claim ${claim}"
  paste <(echo "allocated (claim)"; kubectl get resourceclaim -n team-b "${claim}" \
      -o jsonpath='{range .status.allocation.devices.results[*]}{.device}{"\n"}{end}' | sort -V) \
    <(echo "seen in the container (kubectl logs)"; kubectl logs -n team-b chat-0) | column -t -s $'\t'
fi

say "Done. The control plane, the operator and the simulated kubelet keep running:"
echo "export KUBECONFIG=${KUBECONFIG}"
echo "stop everything with: make demo-down"
