#!/usr/bin/env bash
# `make lint`: what a change must pass before any test runs.
#
#   hack/lint.sh [CHECK...]    the checks named (all by default):
#     rust        cargo fmt --check, cargo clippy -D warnings
#     licenses    every crate the operator and its tests are built from carries a licence deny.toml allows
#                 (tests/licenses.rs, over `cargo metadata`; only licences: an advisory database needs the network;
#                 its tests are ignored by a plain `cargo test`, so this is where they run)
#     workflows   actionlint over .github/workflows (the release workflow, docs/release.md), with shellcheck over
#                 every `run:` script (Debian's `shellcheck`, which .ci/run installs; missing, the check fails rather
#                 than pass without it). pyflakes stays off: no workflow runs Python.
#
# actionlint is built once per machine from its Go module into ~/.cache (hack/tools.sh; about 20 s cold).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CARGO="${CARGO:-cargo}"

rust() {
  "${CARGO}" fmt --check
  "${CARGO}" clippy --locked --all-targets -- -D warnings
}

licenses() {
  "${CARGO}" test --locked --quiet --test licenses -- --ignored
}

workflows() {
  local actionlint
  actionlint="$(hack/tools.sh path actionlint)"
  local shellcheck
  shellcheck="$(command -v shellcheck)" || { echo "lint: needs shellcheck (apt-get install -y shellcheck)" >&2; exit 1; }
  "${actionlint}" -no-color -shellcheck="${shellcheck}" -pyflakes= .github/workflows/*.yml
}

checks=("$@")
((${#checks[@]})) || checks=(rust licenses workflows)
for check in "${checks[@]}"; do
  case "${check}" in
    rust | licenses | workflows) echo "lint: ${check}" >&2; "${check}" ;;
    *) echo "usage: $0 [rust|licenses|workflows]..." >&2; exit 2 ;;
  esac
done
