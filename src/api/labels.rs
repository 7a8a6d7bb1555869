//! The field manager, labels and annotations the operator puts on what it owns: users and other tools select by
//! them, so they are part of the API.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub const MANAGER: &str = "neuron-dra-operator";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_CONFIG: &str = "neurondra.io/config";
pub const LABEL_PROFILE: &str = "neurondra.io/profile";
/// On the claims made from a template (copied there by the resourceclaim controller): the template's name.
pub const LABEL_CLAIM_TEMPLATE: &str = "neurondra.io/template";
/// On objects several configs may share (the driver Namespace, the DeviceClass) instead of `neurondra.io/config`.
pub const LABEL_SHARED: &str = "neurondra.io/shared";
/// Hash of a template's spec: templates are immutable, so a changed hash means delete and re-create.
pub const ANNOTATION_SPEC_HASH: &str = "neurondra.io/spec-hash";

/// Whether the operator made the object: it carries the operator's managed-by label. An object of a name the
/// operator wants without it is another tool's: reported `ForeignObject` and left as it is.
pub fn ours(meta: &ObjectMeta) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(LABEL_MANAGED_BY)).is_some_and(|v| v == MANAGER)
}
