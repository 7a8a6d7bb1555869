#!/usr/bin/env bash
# The lab's network namespace from the outside (hack/lib/lab.sh; docs/local-node.md "Addresses").
#
#   hack/lab.sh exec CMD...   run CMD in the lab's network namespace, where the API server, the webhook servers the
#                             tests start (Kueue's) and the nodes are reachable directly: how `make test` runs its
#                             tests. Needs a running control plane (hack/controlplane.sh up). The namespace has no
#                             way out of the machine, so cargo runs offline there.
#   hack/lab.sh name          print the namespace's name (`ip netns exec $(hack/lab.sh name) ...`)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/lab.sh
source "${REPO_ROOT}/hack/lib/lab.sh"

case "${1:-}" in
  exec)
    shift
    (($# > 0)) || { echo "usage: $0 exec CMD..." >&2; exit 2; }
    lab_exists || { echo "lab: ${LAB_NETNS} does not exist: run hack/controlplane.sh up" >&2; exit 1; }
    CARGO_NET_OFFLINE=true exec nsenter --net="${LAB_NETNS_PATH}" -- "$@"
    ;;
  name) echo "${LAB_NETNS}" ;;
  *) echo "usage: $0 exec CMD...|name" >&2; exit 2 ;;
esac
