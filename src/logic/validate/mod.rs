//! validate (pure): a `NeuronDRAConfig` to a `ValidatedConfig`, or every problem found, each naming its field.
//!
//! Three layers check a config: the CRD schema and CEL rules in the API server, the `validator` derive on the
//! API types (the same bounds, for offline `render`), and the catalog rules here that need knowledge of
//! instance types. The CEL rules are repeated here so that `render` rejects what the API server would.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use validator::Validate;

use crate::api::{
    DNS_LABEL, DeviceCount, DeviceRequest, FALLBACKS_WITH_EFA, MAX_DISAGGREGATED_NAME, NODE_ENTRIES_OVER_DEVICES,
    NeuronDRAConfig, NeuronDRAConfigSpec, Profile,
};
use crate::logic::catalog;

mod errors;
mod lnc;

use errors::flatten_validator_errors;
pub use errors::{FieldError, InvalidConfig};
pub use lnc::effective_lnc;

/// Longest config name: it is part of the plugin DaemonSet's name.
pub const MAX_CONFIG_NAME: usize = 40;

/// How many devices one claim asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    All,
    Exactly(u32),
}

/// What a claim allocates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimKind {
    /// Neuron devices on one node, with `efa` interfaces aligned to them when asked for.
    Devices { count: Count, efa: Option<Count> },
    /// One UltraServer node entry (`resourceType == 'neuron_node'`) joined with others by the driver.
    UltraServerNode { nodes: u8 },
}

/// One way to satisfy a claim: which devices, how many, and their Logical NeuronCore setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub instance_type: Option<String>,
    pub neuron_driver_version: Option<String>,
    pub logical_neuron_core: Option<u8>,
    pub kind: ClaimKind,
}

/// One ResourceClaimTemplate to be, resolved from a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSpec {
    /// Template name (the profile name, or `<name>-prefill` / `<name>-decode`).
    pub template: String,
    pub profile: String,
    /// The request, then its fallbacks in order; never empty. More than one only for device requests without EFA.
    pub choices: Vec<Choice>,
}

impl ClaimSpec {
    /// The preferred choice (the request as written).
    pub fn first(&self) -> &Choice {
        &self.choices[0]
    }
}

/// A config that passed every check, with its profiles resolved into claims.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedConfig {
    pub name: String,
    pub uid: Option<String>,
    pub spec: NeuronDRAConfigSpec,
    /// In profile order; a disaggregated profile gives prefill then decode.
    pub claims: Vec<ClaimSpec>,
}

impl ValidatedConfig {
    /// Template names per profile, in profile order.
    pub fn templates_by_profile(&self) -> Vec<(String, Vec<String>)> {
        let mut grouped: Vec<(String, Vec<String>)> = Vec::new();
        for claim in &self.claims {
            match grouped.last_mut() {
                Some((profile, templates)) if *profile == claim.profile => templates.push(claim.template.clone()),
                _ => grouped.push((claim.profile.clone(), vec![claim.template.clone()])),
            }
        }
        grouped
    }
}

/// Checks a config and resolves its profiles.
pub fn validate(config: &NeuronDRAConfig) -> Result<ValidatedConfig, InvalidConfig> {
    let mut errors = Vec::new();
    let name = config.metadata.name.clone().unwrap_or_default();
    check_config_name(&name, &mut errors);

    if let Err(found) = config.spec.validate() {
        flatten_validator_errors("spec", &found, &mut errors);
    }
    check_extended_resource(config.spec.extended_resource_name.as_deref(), &mut errors);
    check_selector("spec.nodeSelector", config.spec.node_selector.as_ref(), &mut errors);
    check_selector("spec.templates.namespaceSelector", config.spec.templates.namespace_selector.as_ref(), &mut errors);
    for (index, quota) in config.spec.quotas.iter().enumerate() {
        let path = format!("spec.quotas[{index}]");
        if quota.namespaces.is_empty() && quota.namespace_selector.is_none() {
            errors.push(FieldError::new(&path, "set namespaces, namespaceSelector or both"));
        }
        check_selector(&format!("{path}.namespaceSelector"), quota.namespace_selector.as_ref(), &mut errors);
        // The CEL rule NODE_ENTRIES_WITHIN_DEVICES, with the catalog's figure.
        if let Some(nodes) = quota.ultra_server_nodes
            && nodes.saturating_mul(catalog::ULTRA_SERVER_NODE_DEVICES) > quota.devices
        {
            errors.push(FieldError::new(format!("{path}.ultraServerNodes"), NODE_ENTRIES_OVER_DEVICES));
        }
    }
    // The rollout and remediation policies' CEL rules, and driver.kubeletDir's.
    if let Some(reason) = crate::api::kubelet_dir_problem(&config.spec.driver.kubelet_dir) {
        errors.push(FieldError::new("spec.driver.kubeletDir", reason));
    }
    errors.extend(crate::api::rollout_problems(&config.spec.driver).into_iter().map(|(p, r)| FieldError::new(p, r)));
    check_driver_pod(&config.spec.driver, &mut errors);
    let remediation = crate::api::remediation_problems(config.spec.remediation.as_ref());
    errors.extend(remediation.into_iter().map(|(p, r)| FieldError::new(p, r)));

    let mut claims = Vec::new();
    for (index, profile) in config.spec.profiles.iter().enumerate() {
        claims.extend(resolve_profile(&format!("spec.profiles[{index}]"), profile, &mut errors));
    }
    check_unique_templates(&config.spec.profiles, &claims, &mut errors);

    if errors.is_empty() {
        Ok(ValidatedConfig { name, uid: config.metadata.uid.clone(), spec: config.spec.clone(), claims })
    } else {
        errors.sort();
        errors.dedup();
        Err(InvalidConfig(errors))
    }
}

/// What the operator policy admits of the plugin's pod (config/rbac/operator_policy.yaml, #50): refused here first,
/// in the config's status, rather than half-written and refused at admission.
fn check_driver_pod(driver: &crate::api::DriverSpec, errors: &mut Vec<FieldError>) {
    for (i, var) in driver.env.iter().enumerate() {
        let from = var.value_from.as_ref();
        if from.is_some_and(|f| f.secret_key_ref.is_some() || f.config_map_key_ref.is_some()) {
            let reason = "a value from a Secret or ConfigMap is not allowed (only value, fieldRef or resourceFieldRef)";
            errors.push(FieldError::new(format!("spec.driver.env[{i}].valueFrom"), reason));
        }
    }
    for (i, toleration) in driver.tolerations.iter().enumerate() {
        if toleration.key.as_deref().unwrap_or_default().is_empty() {
            let reason = "must name a key: a toleration without one tolerates every taint";
            errors.push(FieldError::new(format!("spec.driver.tolerations[{i}].key"), reason));
        }
    }
    if let Some(resources) = &driver.resources {
        if resources.claims.as_ref().is_some_and(|c| !c.is_empty()) {
            errors.push(FieldError::new("spec.driver.resources.claims", "the plugin claims no devices"));
        }
        let named = [("requests", &resources.requests), ("limits", &resources.limits)];
        for (field, quantities) in named {
            for key in quantities.iter().flatten().map(|(k, _)| k).filter(|k| !["cpu", "memory"].contains(&k.as_str()))
            {
                let reason = format!("{key} is not allowed: only cpu and memory");
                errors.push(FieldError::new(format!("spec.driver.resources.{field}"), reason));
            }
        }
    }
}

fn check_config_name(name: &str, errors: &mut Vec<FieldError>) {
    if name.is_empty() {
        errors.push(FieldError::new("metadata.name", "is required"));
    } else if name.len() > MAX_CONFIG_NAME {
        errors.push(FieldError::new(
            "metadata.name",
            format!("must be at most {MAX_CONFIG_NAME} characters (it names the plugin DaemonSet)"),
        ));
    } else if !DNS_LABEL.is_match(name) {
        errors.push(FieldError::new("metadata.name", "must be a DNS label (lower-case letters, digits and '-')"));
    }
}

/// The CEL rule on `extendedResourceName` (its pattern and length are checked by the derive).
fn check_extended_resource(name: Option<&str>, errors: &mut Vec<FieldError>) {
    let Some(name) = name else { return };
    let domain = name.split_once('/').map_or("", |(domain, _)| domain);
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
        errors.push(FieldError::new(
            "spec.extendedResourceName",
            "must not be in the kubernetes.io domain (kept for Kubernetes' own resources)",
        ));
    }
}

fn check_selector(path: &str, selector: Option<&LabelSelector>, errors: &mut Vec<FieldError>) {
    let Some(selector) = selector else { return };
    for (index, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let path = format!("{path}.matchExpressions[{index}]");
        let values = expr.values.as_ref().map_or(0, Vec::len);
        match expr.operator.as_str() {
            "In" | "NotIn" if values == 0 => {
                errors.push(FieldError::new(format!("{path}.values"), "must not be empty for In and NotIn"))
            }
            "Exists" | "DoesNotExist" if values > 0 => {
                errors.push(FieldError::new(format!("{path}.values"), "must be empty for Exists and DoesNotExist"))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.push(FieldError::new(
                format!("{path}.operator"),
                format!("{other:?} is not one of In, NotIn, Exists, DoesNotExist"),
            )),
        }
    }
}

fn resolve_profile(path: &str, profile: &Profile, errors: &mut Vec<FieldError>) -> Vec<ClaimSpec> {
    let kinds = [profile.training.is_some(), profile.long_context_inference.is_some(), profile.disaggregated.is_some()];
    if kinds.iter().filter(|set| **set).count() != 1 {
        errors
            .push(FieldError::new(path, "exactly one of training, longContextInference or disaggregated must be set"));
        return Vec::new();
    }
    let name = &profile.name;
    let claim = |template: String, choices: Vec<Choice>| ClaimSpec { template, profile: name.clone(), choices };

    if let Some(training) = &profile.training {
        return vec![claim(name.clone(), resolve_choices(&format!("{path}.training"), training, errors))];
    }
    if let Some(inference) = &profile.long_context_inference {
        let path = format!("{path}.longContextInference");
        let request = inference.request();
        let choices = match inference.ultra_server_nodes {
            Some(nodes) => {
                for (field, set) in [
                    ("devices", inference.devices.is_some()),
                    ("efa", inference.efa == Some(true)),
                    ("fallbacks", !inference.fallbacks.is_empty()),
                ] {
                    if set {
                        errors
                            .push(FieldError::new(format!("{path}.{field}"), "must not be set with ultraServerNodes"));
                    }
                }
                resolve_ultra_server(&path, &request, errors);
                vec![choice(&request, ClaimKind::UltraServerNode { nodes })]
            }
            None => resolve_choices(&path, &request, errors),
        };
        return vec![claim(name.clone(), choices)];
    }
    let disaggregated = profile.disaggregated.as_ref().expect("one kind is set");
    if name.len() > MAX_DISAGGREGATED_NAME {
        errors.push(FieldError::new(
            format!("{path}.name"),
            format!(
                "must be at most {MAX_DISAGGREGATED_NAME} characters for a disaggregated profile \
                 (room for the -prefill and -decode suffixes)"
            ),
        ));
    }
    let prefill = resolve_choices(&format!("{path}.disaggregated.prefill"), &disaggregated.prefill, errors);
    let decode = resolve_choices(&format!("{path}.disaggregated.decode"), &disaggregated.decode, errors);
    vec![claim(format!("{name}-prefill"), prefill), claim(format!("{name}-decode"), decode)]
}

fn choice(request: &DeviceRequest, kind: ClaimKind) -> Choice {
    Choice {
        instance_type: request.instance_type.clone(),
        neuron_driver_version: request.neuron_driver_version.clone(),
        logical_neuron_core: request.logical_neuron_core,
        kind,
    }
}

/// A device request and its fallbacks, each checked against the catalog like the request itself.
fn resolve_choices(path: &str, request: &DeviceRequest, errors: &mut Vec<FieldError>) -> Vec<Choice> {
    if !request.fallbacks.is_empty() && request.efa == Some(true) {
        errors.push(FieldError::new(format!("{path}.fallbacks"), FALLBACKS_WITH_EFA));
    }
    lnc::check_fallbacks_keep_lnc(path, request, errors);
    let mut choices = vec![choice(request, resolve_devices(path, request, errors))];
    for (index, fallback) in request.fallbacks.iter().enumerate() {
        let path = format!("{path}.fallbacks[{index}]");
        let fallback = fallback.request();
        let next = choice(&fallback, resolve_devices(&path, &fallback, errors));
        // The scheduler allocates a choice from its selectors and count alone: one that repeats an earlier choice
        // (even with another Logical NeuronCore setting) fails where that one failed and is never picked.
        if choices.iter().any(|earlier| same_devices(earlier, &next)) {
            errors.push(FieldError::new(
                path,
                "asks for the same devices as the request or an earlier fallback, so it would never be chosen",
            ));
        }
        choices.push(next);
    }
    choices
}

fn same_devices(a: &Choice, b: &Choice) -> bool {
    a.instance_type == b.instance_type && a.neuron_driver_version == b.neuron_driver_version && a.kind == b.kind
}

/// Checks a device request against the catalog and resolves its counts.
fn resolve_devices(path: &str, request: &DeviceRequest, errors: &mut Vec<FieldError>) -> ClaimKind {
    let instance = check_instance_type(path, request, errors);
    let count = match request.devices.unwrap_or(DeviceCount::ALL) {
        DeviceCount::All(_) => Count::All,
        DeviceCount::Count(n) if DeviceCount::ALLOWED_COUNTS.contains(&n) => Count::Exactly(n),
        DeviceCount::Count(n) => {
            errors.push(FieldError::new(format!("{path}.devices"), format!("{n} is not one of All, 1, 4, 8 or 16")));
            Count::Exactly(n)
        }
    };
    if let (Count::Exactly(n), Some(instance)) = (count, instance)
        && let Some(total) = instance.devices.filter(|total| n > *total)
    {
        errors.push(FieldError::new(
            format!("{path}.devices"),
            format!("{n} is more than the {total} devices of {}", instance.name),
        ));
    }
    let efa = if request.efa == Some(true) {
        if let Some(instance) = instance.filter(|i| i.efa_interfaces == 0) {
            errors.push(FieldError::new(format!("{path}.efa"), format!("{} has no EFA interfaces", instance.name)));
        }
        Some(match count {
            Count::All => Count::All,
            Count::Exactly(n) => Count::Exactly(instance.map_or(n, |i| i.efa_for(n))),
        })
    } else {
        None
    };
    ClaimKind::Devices { count, efa }
}

fn resolve_ultra_server(path: &str, request: &DeviceRequest, errors: &mut Vec<FieldError>) {
    if let Some(instance) = check_instance_type(path, request, errors)
        && !instance.ultra_server
    {
        errors.push(FieldError::new(
            format!("{path}.ultraServerNodes"),
            format!("{} is not an UltraServer type (use trn2u.48xlarge or trn3.48xlarge)", instance.name),
        ));
    }
}

/// Rules that depend on the instance type; returns the catalog row when the type is known.
fn check_instance_type(
    path: &str,
    request: &DeviceRequest,
    errors: &mut Vec<FieldError>,
) -> Option<&'static catalog::InstanceType> {
    let name = request.instance_type.as_deref()?;
    if catalog::is_inferentia(name) {
        errors.push(FieldError::new(
            format!("{path}.instanceType"),
            format!("{name} is Inferentia, which the Neuron DRA driver does not support"),
        ));
        return None;
    }
    let instance = catalog::lookup(name)?;
    if request.logical_neuron_core.is_some() && !instance.lnc {
        errors.push(FieldError::new(
            format!("{path}.logicalNeuronCore"),
            format!("{name} does not support Logical NeuronCore configuration (only Trn2 and Trn3 do)"),
        ));
    }
    Some(instance)
}

fn check_unique_templates(profiles: &[Profile], claims: &[ClaimSpec], errors: &mut Vec<FieldError>) {
    let index_of: BTreeMap<&str, usize> =
        profiles.iter().enumerate().rev().map(|(i, p)| (p.name.as_str(), i)).collect();
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    for (index, profile) in profiles.iter().enumerate() {
        if index_of[profile.name.as_str()] != index {
            errors.push(FieldError::new(
                format!("spec.profiles[{index}].name"),
                format!("duplicate profile name {:?}", profile.name),
            ));
        }
    }
    for claim in claims {
        match owner.insert(&claim.template, &claim.profile) {
            Some(first) if first != claim.profile => errors.push(FieldError::new(
                format!("spec.profiles[{}].name", index_of[claim.profile.as_str()]),
                format!("template name {:?} is also produced by profile {first:?}", claim.template),
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
