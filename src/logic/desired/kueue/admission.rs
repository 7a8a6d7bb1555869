//! Whether Kueue can admit pods that use a profile's templates (pure): Kueue v0.19 counts a claim's devices per
//! DeviceClass before it admits a workload and marks the workload inadmissible when it cannot
//! (`countDevicesPerClass` and `GetResourceRequestsForResourceClaimTemplates` in its `pkg/dra/claims.go`): a request
//! with `firstAvailable`, with `adminAccess`, or with `allocationMode: All`, or one from a DeviceClass that
//! `render --kueue`'s Configuration does not map. The profile's status says so (docs/kueue.md).

use k8s_openapi::api::resource::v1::{DeviceRequest, ResourceClaimTemplateSpec};

use super::device_class_names;
use crate::api::KueueAdmission;
use crate::logic::catalog;
use crate::logic::desired::{Allocator, OwnClasses, template_spec, ultra_server_node_class_name};
use crate::logic::validate::{ClaimSpec, ValidatedConfig};

/// Kueue's verdict on the templates of `profile`, as shaped for the server's `allocator`: the first template it
/// cannot count, with why.
pub fn kueue_admission(config: &ValidatedConfig, profile: &str, allocator: Allocator) -> KueueAdmission {
    let mut mapped = device_class_names(config);
    mapped.push(ultra_server_node_class_name(&config.spec.device_class_name));
    let refusal = config.claims.iter().filter(|c| c.profile == profile).find_map(|claim| {
        // Kueue counts requests and classes, not selectors: either shape gives the same verdict.
        let spec = template_spec(config, claim, OwnClasses::BOTH, allocator);
        refusal(&spec, &mapped)
            .map(|why| format!("template {}: {why}{}", claim.template, advice(claim, &why, allocator)))
    });
    KueueAdmission { admissible: refusal.is_none(), reason: refusal }
}

/// Why Kueue cannot count the template's devices, if it cannot.
pub fn refusal(spec: &ResourceClaimTemplateSpec, mapped: &[String]) -> Option<String> {
    let requests = spec.spec.devices.as_ref()?.requests.as_deref().unwrap_or_default();
    requests.iter().find_map(|request| request_refusal(request, mapped))
}

fn request_refusal(request: &DeviceRequest, mapped: &[String]) -> Option<String> {
    let name = &request.name;
    if request.first_available.is_some() {
        return Some(format!("request {name} has fallbacks (firstAvailable), which Kueue does not count"));
    }
    let exactly = request.exactly.as_ref()?;
    if exactly.admin_access == Some(true) {
        return Some(format!("request {name} asks for adminAccess, which Kueue does not count"));
    }
    if exactly.allocation_mode.as_deref() == Some("All") {
        return Some(format!(
            "request {name} asks for every device of a node (allocationMode All), which Kueue cannot count"
        ));
    }
    let class = &exactly.device_class_name;
    (!mapped.contains(class))
        .then(|| format!("request {name} asks for DeviceClass {class}, which the Kueue Configuration does not map"))
}

/// For a whole node: the same promise as a count Kueue can charge, the type's devices (`devices: 16` on trn2.48xlarge),
/// where the server's scheduler allocates such a count quickly; before 1.36 the operator asks for it as `All`.
fn advice(claim: &ClaimSpec, why: &str, allocator: Allocator) -> String {
    if !why.contains("allocationMode All") {
        return String::new();
    }
    if allocator == Allocator::Orderings {
        return "; before Kubernetes 1.36 every device of a node is asked for as All, which fails fast on a node \
                with a device in use where a count would search for seconds (docs/decisions.md); from 1.36 on, \
                devices: 16 is a count Kueue can charge"
            .to_string();
    }
    let whole = claim.first().instance_type.as_deref().and_then(catalog::lookup).and_then(|t| t.devices);
    match (claim.first().instance_type.as_deref(), whole) {
        (Some(name), Some(devices)) => format!("; ask for devices: {devices} (every device of a {name}) instead"),
        _ => "; ask for the instance type's device count (devices: 16 on trn2.48xlarge) instead".to_string(),
    }
}
