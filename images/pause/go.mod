// The pause process of the local node's pod sandboxes (see images/pause/Containerfile and hack/images.sh).
module neuron-dra-operator/images/pause

go 1.24.0
