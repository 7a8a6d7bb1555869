#!/usr/bin/env bash
# Proves a real node of the local control plane works end to end (see docs/local-node.md):
#   hack/node-check.sh [NODE]     (default node-1; needs `NODES=1 hack/controlplane.sh up` first)
# Two busybox pods on NODE (imagePullPolicy IfNotPresent: the image was imported, never pulled) become Running; their
# logs and an exec come back through the API server and the kubelet; one pod reaches the other's HTTP server by pod
# IP, and so does the lab's network namespace, where the API server runs (hack/lib/lab.sh). The pods are deleted at the end, also when a check fails. (Debian's static busybox wget
# crashes with -T; `timeout` bounds it instead.)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/lab.sh
source "${REPO_ROOT}/hack/lib/lab.sh"
export KUBECONFIG="${REPO_ROOT}/target/controlplane/kubeconfig"
NODE="${1:-node-1}"
NS="node-check"
IMAGE="$("${REPO_ROOT}/hack/images.sh" ref busybox)"

log() { echo "node-check: $*" >&2; }
fail() {
  log "FAILED: $*"
  kubectl -n "${NS}" get pods -o wide >&2 || true
  kubectl -n "${NS}" describe pods >&2 || true
  exit 1
}
cleanup() { kubectl delete namespace "${NS}" --ignore-not-found --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

kubectl get node "${NODE}" >/dev/null || fail "no Node ${NODE}"
# A namespace left by an earlier run may still be terminating.
kubectl wait --for=delete "namespace/${NS}" --timeout=120s >/dev/null 2>&1 || true
kubectl create namespace "${NS}" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# The namespace's default ServiceAccount, which pods need, comes from the serviceaccount controller.
for _ in $(seq 50); do kubectl -n "${NS}" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.2; done

pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: node-check}}
spec:
  nodeSelector: {kubernetes.io/hostname: ${NODE}}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: ${IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "$2"]
EOF
}
start=${SECONDS}
# kube-scheduler binds them; the node selector keeps them off the simulated fleet, if one is there too (its stand-in
# kubelet would report them Running without running anything).
pod sleeper 'echo hello from $(hostname); exec sleep 3600' | kubectl -n "${NS}" apply -f - >/dev/null
pod web 'mkdir -p /www && echo pong > /www/index.html && exec httpd -f -p 8080 -h /www' |
  kubectl -n "${NS}" apply -f - >/dev/null
kubectl -n "${NS}" wait --for=condition=Ready pod/sleeper pod/web --timeout=120s >/dev/null || fail "pods not Ready"
log "pods Running and Ready in $((SECONDS - start))s"
kubectl -n "${NS}" get pods -o wide

logs="$(kubectl -n "${NS}" logs sleeper)"
[[ "${logs}" == "hello from sleeper" ]] || fail "kubectl logs: '${logs}'"
log "kubectl logs: ${logs}"

out="$(kubectl -n "${NS}" exec sleeper -- sh -c 'echo exec ok in $(hostname)')"
[[ "${out}" == "exec ok in sleeper" ]] || fail "kubectl exec: '${out}'"
log "kubectl exec: ${out}"

web_ip="$(kubectl -n "${NS}" get pod web -o jsonpath='{.status.podIP}')"
sleeper_ip="$(kubectl -n "${NS}" get pod sleeper -o jsonpath='{.status.podIP}')"
[[ -n "${web_ip}" && "${web_ip}" != "${sleeper_ip}" ]] || fail "pod IPs: web=${web_ip} sleeper=${sleeper_ip}"
out="$(kubectl -n "${NS}" exec sleeper -- timeout 5 wget -q -O - "http://${web_ip}:8080/")"
[[ "${out}" == pong ]] || fail "pod ${sleeper_ip} -> pod ${web_ip}:8080: '${out}'"
log "pod ${sleeper_ip} -> pod ${web_ip}:8080: ${out}"
out="$(lab_exec curl -fsS --max-time 5 "http://${web_ip}:8080/")" || fail "lab -> pod ${web_ip}:8080"
[[ "${out}" == pong ]] || fail "lab -> pod ${web_ip}:8080: '${out}'"
log "lab -> pod ${web_ip}:8080: ${out}"
versions="$(kubectl get node "${NODE}" \
  -o jsonpath='{.status.nodeInfo.kubeletVersion}, {.status.nodeInfo.containerRuntimeVersion}')"
log "all checks passed on ${NODE} (kubelet ${versions})"
