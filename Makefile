# The few commands of neuron-dra-operator. `make test` is what CI (.ci/run) runs.
SHELL := bash
CARGO ?= cargo
KUBECONFIG_LOCAL := $(CURDIR)/target/controlplane/kubeconfig

include hack/controlplane.mk

.PHONY: build release publish release-check version lint test test-node unit-test crds bench demo demo-down tools

## The main job on one machine: control plane, simulated fleet, operator, the mixed sample, one faulty device.
demo:
	hack/demo.sh

demo-down:
	hack/demo.sh down

build:
	$(CARGO) build --locked

## The release into dist/ (docs/release.md): the multi-architecture operator image and the bundle image as OCI
## archives, the packaged chart, the SBOM and SHA256SUMS. VERSION must be the tree's (`make version` writes it).
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=x.y.z" >&2; exit 2; }
	hack/release.sh build $(VERSION)

## Build the release (unless dist/ holds it) and push it to REGISTRY (host/path, e.g. ghcr.io/you): the image index,
## the bundle image and the chart as an OCI artifact (docs/release.md; log in with skopeo and helm first).
publish:
	@test -n "$(VERSION)" -a -n "$(REGISTRY)" || { echo "usage: make publish VERSION=x.y.z REGISTRY=host/path" >&2; exit 2; }
	hack/release.sh publish $(REGISTRY) $(VERSION)

## The release's fast subset (unoptimised binaries, no SBOM) into target/release-check-dist, and the test that checks it.
release-check:
	hack/release.sh check
	$(CARGO) test --locked --test release -- --ignored

## Write VERSION into Cargo.toml, Cargo.lock, the chart, the kustomize image tag and the OLM bundle.
version:
	@test -n "$(VERSION)" || { echo "usage: make version VERSION=x.y.z" >&2; exit 2; }
	hack/release.sh set-version $(VERSION)

## Regenerate the checked-in CRD from the Rust types (and its copy in the Helm chart).
crds:
	$(CARGO) run --locked --quiet --bin neuron-dra-operator -- crd > crds/neurondra.io_neurondraconfigs.yaml
	$(MAKE) --no-print-directory chart

## The Helm chart's copies of what it shares with crds/ and config/ (a test fails when one is stale): the CRD (a
## template, templates/crd.yaml, so that `helm upgrade` upgrades it), the RBAC rules, the kubelet plugin's ClusterRole and fences, the alerts and the dashboard; and its README, generated from values.yaml. Its templates are compared with config/ by tests/helm.rs.
CHART := charts/neuron-dra-operator
.PHONY: chart
chart:
	cp crds/neurondra.io_neurondraconfigs.yaml $(CHART)/files/neurondra.io_neurondraconfigs.yaml
	cp config/rbac/role.yaml $(CHART)/files/role.yaml
	cp config/rbac/leader_election_role.yaml $(CHART)/files/leader_election_role.yaml
	cp config/rbac/metrics_auth_role.yaml $(CHART)/files/metrics_auth_role.yaml
	cp config/rbac/metrics_reader_role.yaml $(CHART)/files/metrics_reader_role.yaml
	cp config/rbac/operator_policy.yaml $(CHART)/files/operator_policy.yaml
	cp config/rbac/plugin_role.yaml $(CHART)/files/plugin_role.yaml
	cp config/rbac/plugin_fence.yaml $(CHART)/files/plugin_fence.yaml
	cp config/prometheus/prometheus_rule.yaml $(CHART)/files/prometheus_rule.yaml
	cp config/grafana/neuron-dra-operator.json $(CHART)/files/neuron-dra-operator.json
	$(CARGO) run --locked --quiet --features devtools --bin neuron-dra-devtools -- chart-readme --chart $(CHART)

## The operator image, as config/manager/kustomization.yaml names it (the one place; hack/release.sh reads it).
IMG_TAG := $(shell hack/release.sh ref tag)
IMG ?= $(shell hack/release.sh ref operator)
BUNDLE_IMG ?= $(shell hack/release.sh ref bundle)
CONTAINER_TOOL ?= docker

.PHONY: bundle image bundle-image

## Regenerate the OLM bundle under bundle/ from config/, crds/ and samples/ (a test fails when it is stale).
bundle:
	$(CARGO) run --locked --quiet --features devtools --bin neuron-dra-devtools -- bundle --output bundle

## The operator image and the OLM bundle image (need a container engine; the tests do not build them).
image:
	$(CONTAINER_TOOL) build --build-arg VERSION=$(IMG_TAG) --build-arg REVISION=$(shell git rev-parse HEAD 2>/dev/null) \
	  -t $(IMG) .

bundle-image:
	$(CONTAINER_TOOL) build -f bundle/bundle.Dockerfile -t $(BUNDLE_IMG) bundle

## Helm, the bundle validator, kstatus and actionlint built from Go modules, promtool unpacked from Debian's
## package, into ~/.cache (once per version).
tools:
	hack/tools.sh build

## Format, clippy, every dependency's licence (deny.toml) and the GitHub workflows (actionlint): hack/lint.sh.
lint:
	CARGO="$(CARGO)" hack/lint.sh

## Unit tests and the tests that need no cluster.
unit-test:
	$(CARGO) test --locked --lib --bins --test render_cli --test architecture --test workloads

## The supported Kubernetes range (docs/compatibility.md "Kubernetes versions"): the whole suite runs on the oldest, the tests of
## what changed in DRA since then on the newest.
KUBE_OLDEST := v1.34.4
KUBE_NEWEST := v1.37.2
NEWEST_TESTS := --test apiserver --test controller --test health --test allocation --test busy_fleet --test versions --test remediation \
  --test samples --test quotas --test kueue --test least_privilege --test least_privilege_plugin \
  --test least_privilege_rbac --test unfenced
## The tests that run containers on the real nodes (ignored by a plain `cargo test`): all of them on the oldest
## release (with `make demo` and `make demo-down` end to end, tests/real_node_demo.rs), the kubelet's side (plugin,
## pods, rollout, remediation, faults on two nodes) on the newest.
NODE_TESTS := --test lab_network --test real_node --test real_node_install --test real_node_faults --test real_node_demo \
  --test real_node_workloads
NODE_TESTS_NEWEST := --test real_node --test real_node_faults

## Everything: lint, then unit and integration tests against a real local control plane of each end of the
## supported range, each followed by the real-node tests, stopped again even when a test fails (hack/test.sh; on a
## cold machine it builds what the later phases need in the background at low priority).
test:
	KUBE_OLDEST=$(KUBE_OLDEST) KUBE_NEWEST=$(KUBE_NEWEST) NEWEST_TESTS="$(NEWEST_TESTS)" NODE_TESTS="$(NODE_TESTS)" \
	  NODE_TESTS_NEWEST="$(NODE_TESTS_NEWEST)" CARGO="$(CARGO)" hack/test.sh

## The real-node tests against the running control plane: starts node-1 and node-2 (or reuses them), then runs
## them one at a time (the nodes serve them all). docs/local-node.md.
test-node:
	@# An operator Deployment another test left (its pods never ran without a node) would start on the node and
	@# manage every config beside the tests' own operators.
	kubectl --kubeconfig $(KUBECONFIG_LOCAL) delete deployments -A -l app.kubernetes.io/name=neuron-dra-operator \
	  --ignore-not-found --wait=true >/dev/null
	@# Simulated nodes a failed test left are Ready to the scheduler: the real node's pods would land there.
	KUBECONFIG=$(KUBECONFIG_LOCAL) $(CARGO) run --locked --quiet --features devtools --bin neuron-dra-devtools -- \
	  simulate clear
	$(NODE_SH) up node-1
	$(NODE_SH) up node-2
	KUBECONFIG=$(KUBECONFIG_LOCAL) hack/lab.sh exec $(CARGO) test --locked --no-fail-fast $(NODE_TESTS) -- --ignored \
	  --test-threads=1

## Benchmarks on a fresh local control plane; prints one table (see docs/benchmarks.md).
## BENCH_ONLY=scheduling runs the scheduling-throughput target (benches/scheduling), any other the operator's.
BENCH_TARGET = $(if $(filter scheduling,$(BENCH_ONLY)),scheduling,operator)
bench:
	$(CONTROLPLANE_SH) down
	@# No node dies in a benchmark: an hour's grace period, and no simulated heartbeats (a Lease write per simulated
	@# node every 3 s) to load the API server beside what is measured (docs/benchmarks.md).
	NODE_MONITOR_GRACE_PERIOD=1h $(CONTROLPLANE_SH) up
	status=0; NEURON_DRA_SIMULATE_HEARTBEAT=off KUBECONFIG=$(KUBECONFIG_LOCAL) hack/lab.sh exec $(CARGO) bench --locked \
	  --bench $(BENCH_TARGET) || status=$$?; \
	$(CONTROLPLANE_SH) down; exit $$status
