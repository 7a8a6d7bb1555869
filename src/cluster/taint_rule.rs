//! DeviceTaintRules as the operator reads them, in whichever `resource.k8s.io` version the server serves:
//! `v1alpha3` in 1.34 and 1.35 (feature gates DRADeviceTaints, DRADeviceTaintRules), `v1beta2` in 1.36, `v1` from
//! 1.37. The fields read here have one shape in all three, so one view parses them all; the version is found by
//! discovery when the operator starts.

use k8s_openapi::api::resource::v1::DeviceTaint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::core::{ApiResource, Object};
use serde::{Deserialize, Serialize};

use crate::cluster::{DeviceView, SliceView};

pub const GROUP: &str = "resource.k8s.io";
pub const KIND: &str = "DeviceTaintRule";
/// The condition the device-taint-eviction controller sets on a rule (1.35+).
pub const EVICTION_IN_PROGRESS: &str = "EvictionInProgress";
/// The taint effect that only informs: the device stays schedulable and nothing is evicted (1.35+).
pub const EFFECT_NONE: &str = "None";

/// A DeviceTaintRule: its selector, its taint and its status conditions (absent before 1.35).
pub type TaintRuleView = Object<TaintRuleSpec, TaintRuleStatus>;

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaintRuleSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_selector: Option<TaintSelector>,
    pub taint: DeviceTaint,
}

/// Which devices a rule taints; every field that is set must match.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaintSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// CEL selectors (`v1alpha3` only; removed in 1.35). Not evaluated here, only noticed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct TaintRuleStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// DeviceTaintRule as `resource.k8s.io/v1` names it: the type of an empty cache where the server serves none.
pub fn v1_resource() -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GROUP}/v1"),
        kind: KIND.into(),
        plural: "devicetaintrules".into(),
    }
}

/// The most stable served version of DeviceTaintRule, or `None` where the server serves none (device taints
/// switched off, or an API server older than 1.33).
pub async fn served(client: &Client) -> Option<ApiResource> {
    let group = kube::discovery::group(client, GROUP).await.ok()?;
    group.resources_by_stability().into_iter().map(|(resource, _)| resource).find(|resource| resource.kind == KIND)
}

/// Whether `rule` taints this device. Driver, pool and device name must match where set. A `v1alpha3` rule with
/// CEL selectors counts only when it also names the device (evaluating CEL would need a CEL runtime).
pub fn matches(rule: &TaintRuleView, slice: &SliceView, device: &DeviceView) -> bool {
    let Some(selector) = rule.spec.device_selector.as_ref() else { return false };
    let same = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    same(&selector.driver, &slice.spec.driver)
        && same(&selector.pool, &slice.spec.pool.name)
        && same(&selector.device, &device.name)
        && (selector.selectors.is_empty() || selector.device.is_some())
}

/// The rule's `EvictionInProgress` condition, if the server reports one.
pub fn eviction(rule: &TaintRuleView) -> Option<&Condition> {
    rule.status.as_ref()?.conditions.iter().find(|c| c.type_ == EVICTION_IN_PROGRESS)
}

#[cfg(test)]
mod tests;
