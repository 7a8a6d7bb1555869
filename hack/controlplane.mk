# Local Kubernetes control plane for the integration tests (etcd,
# kube-apiserver, kube-controller-manager). Included by the top-level Makefile:
#
#   include hack/controlplane.mk
#
# After `make controlplane-up`: export KUBECONFIG=$(CURDIR)/target/controlplane/kubeconfig

# Resolved now (:=), while this file is still the last one in MAKEFILE_LIST.
CONTROLPLANE_MK_DIR := $(dir $(lastword $(MAKEFILE_LIST)))
CONTROLPLANE_SH ?= $(CONTROLPLANE_MK_DIR)controlplane.sh

.PHONY: controlplane-build controlplane-up controlplane-down controlplane-status

## Build etcd, kube-apiserver and kube-controller-manager into ~/.cache (once per version).
controlplane-build:
	$(CONTROLPLANE_SH) build

## Start the control plane (or reuse a running one); writes target/controlplane/kubeconfig.
controlplane-up:
	$(CONTROLPLANE_SH) up

## Stop the control plane and remove target/controlplane/.
controlplane-down:
	$(CONTROLPLANE_SH) down

## Report whether the control plane is running.
controlplane-status:
	$(CONTROLPLANE_SH) status
