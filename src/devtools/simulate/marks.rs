//! What the simulator writes on the objects it makes (labels, annotations, taints, plugin image tags that
//! misbehave) and how it writes them: as one field manager, `PARALLEL` requests at a time.

use kube::api::PatchParams;

pub(super) const MANAGER: &str = "neuron-dra-simulator";
/// Node annotation: whether the stand-in kubelet reports the plugin pod Ready.
pub const PLUGIN_READY_ANNOTATION: &str = "neurondra.io/sim-plugin-ready";
pub(super) const DRA_VERSION_ANNOTATION: &str = "neurondra.io/sim-dra-driver-version";
pub(super) const NEURON_VERSION_ANNOTATION: &str = "neurondra.io/sim-neuron-driver-version";
pub(super) const KUBELET_VERSION_ANNOTATION: &str = "neurondra.io/sim-kubelet-version";
pub(super) const PLUGIN_POD_LABEL: &str = "app.kubernetes.io/name=neuron-dra-driver";
/// A plugin image tag ending in this never becomes Ready (with `kubelet --plugin`).
pub const NOT_READY_TAG: &str = "-notready";
/// A plugin image tag ending in this publishes one Neuron device fewer than the node has (with `kubelet --plugin`).
pub const FEWER_DEVICES_TAG: &str = "-fewer";
/// A plugin image tag ending in this gets Ready but never publishes its node's slice (with `kubelet --plugin`).
pub const NO_PUBLISH_TAG: &str = "-nopublish";
/// Taint key the simulated driver uses for a faulty device.
pub const FAULT_TAINT_KEY: &str = "neuron.aws.com/unhealthy";
/// Requests the simulator keeps in flight at once.
pub(super) const PARALLEL: usize = 32;

/// Server-side apply as the simulator, taking over any field another manager set.
pub(super) fn apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}
