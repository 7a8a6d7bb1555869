# shellcheck shell=bash
# Sourced by hack/controlplane.sh, hack/node.sh and hack/lab.sh (REPO_ROOT set by the caller).
#
# The lab's network (docs/local-node.md "Addresses"): every address the local cluster uses lives in a network
# namespace the scripts create, never on the host's own interfaces.
#   - The lab namespace (LAB_NETNS, one per checkout): etcd, the API server, the controller manager and the scheduler
#     on its loopback, and a bridge (LAB_BRIDGE, LAB_ADDRESS/16) that the nodes hang off. The API server listens on
#     both, so the nodes reach it at LAB_ADDRESS.
#   - A namespace per real node (hack/node.sh): a veth pair to the lab bridge, 10.243.<n>.1, default route via the
#     lab; its kubelet, containerd, host-network pods and pod bridge live there.
#   - The host namespace: only a loopback forward (hack/lib/forward.py) from 127.0.0.1:<API port> to the same port
#     in the lab, for a kubectl or a test run from the host's shell. `make test` runs its tests inside the lab.
# No address, route or iptables rule is added to the host's namespace.
LAB_NETNS="ndra-$(printf '%s' "${REPO_ROOT}" | sha256sum | cut -c1-8)"
LAB_NETNS_PATH="/run/netns/${LAB_NETNS}"
LAB_BRIDGE="lab0"
LAB_ADDRESS="10.243.0.1"

lab_exists() { [[ -e "${LAB_NETNS_PATH}" ]]; }

# in_lab: whether this process already runs in the lab's namespace.
in_lab() { lab_exists && [[ "$(stat -L -c %i /proc/self/ns/net)" == "$(stat -L -c %i "${LAB_NETNS_PATH}")" ]]; }

# lab_exec CMD...: CMD in the lab's network namespace (only that one: mounts and processes stay the host's).
lab_exec() { nsenter --net="${LAB_NETNS_PATH}" -- "$@"; }

# lab_up: the lab's namespace with its loopback and bridge up, forwarding between the nodes on (idempotent).
lab_up() {
  [[ ${EUID} -eq 0 ]] || { echo "lab: the local cluster runs in network namespaces of its own: run as root" >&2; return 1; }
  lab_exists || ip netns add "${LAB_NETNS}"
  ip -n "${LAB_NETNS}" link set lo up
  ip -n "${LAB_NETNS}" link show "${LAB_BRIDGE}" >/dev/null 2>&1 || ip -n "${LAB_NETNS}" link add "${LAB_BRIDGE}" type bridge
  ip -n "${LAB_NETNS}" addr replace "${LAB_ADDRESS}/16" dev "${LAB_BRIDGE}"
  ip -n "${LAB_NETNS}" link set "${LAB_BRIDGE}" up
  lab_exec sysctl -qw net.ipv4.ip_forward=1
}

# lab_down: the namespace and everything in it (its links go with it; the nodes' namespaces are hack/node.sh's).
lab_down() {
  if lab_exists; then ip netns delete "${LAB_NETNS}" 2>/dev/null || echo "lab: could not delete ${LAB_NETNS}" >&2; fi
}
