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

# A real node (kubelet + containerd + runc + CNI) next to the control plane; see docs/local-node.md.
NODE_SH ?= $(CONTROLPLANE_MK_DIR)node.sh

.PHONY: node-build node-up node-down node-check node-plugin-check node-images

## Build containerd and the kubelet of the control plane's release into ~/.cache (once per version).
node-build:
	$(NODE_SH) build

## Start the control plane (or reuse it) with one real node, node-1.
node-up:
	NODES=1 $(CONTROLPLANE_SH) up

## Stop the real nodes (the control plane keeps running; controlplane-down stops both).
node-down:
	$(NODE_SH) down

## Prove node-1 works: pods Running, logs, exec and pod IP networking.
node-check:
	$(CONTROLPLANE_MK_DIR)node-check.sh

## Prove the stand-in Neuron kubelet plugin on node-1: the operator rolls it out, a pod runs on claimed devices.
node-plugin-check:
	$(CONTROLPLANE_MK_DIR)node-plugin-check.sh

## Build the local images (pause, busybox, the distroless stand-in, the stand-in Neuron plugin) with buildah,
## without pulling.
node-images:
	$(CONTROLPLANE_MK_DIR)images.sh build
