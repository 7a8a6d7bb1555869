# The few commands of neuron-dra-operator. `make test` is what CI (.ci/run) runs.
SHELL := bash
CARGO ?= cargo
KUBECONFIG_LOCAL := $(CURDIR)/target/controlplane/kubeconfig

include hack/controlplane.mk

.PHONY: build release lint test unit-test crds

build:
	$(CARGO) build --locked

release:
	$(CARGO) build --locked --release

## Regenerate the checked-in CRD from the Rust types.
crds:
	$(CARGO) run --locked --quiet -- crd > crds/neurondra.io_neurondraconfigs.yaml

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

## Unit tests and the tests that need no cluster.
unit-test:
	$(CARGO) test --locked --lib --bins --test render_cli

## Everything: lint, then unit and integration tests against a real local control plane, which is stopped
## again even when a test fails.
test: lint
	$(CARGO) build --locked --all-targets
	$(CONTROLPLANE_SH) up
	status=0; KUBECONFIG=$(KUBECONFIG_LOCAL) $(CARGO) test --locked -- --test-threads=4 || status=$$?; \
	$(CONTROLPLANE_SH) down; exit $$status
