//! fence (pure): whether the kubelet plugin's fence is in place. The fence (`config/rbac/plugin_fence.yaml`, a
//! ValidatingAdmissionPolicy and its binding) is installed once with the operator, which never writes it: the API
//! server runs no admission on writes to policies and bindings, so an operator allowed to write them could remove
//! every fence, its own included. The operator only reads them, and starts or changes no plugin while the fence is
//! missing, does not deny, or is not the one it was built with (an edited copy may refuse less).

use std::sync::LazyLock;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};

/// The name of the plugin's fence: its policy and its binding.
pub const PLUGIN_FENCE: &str = "neuron-dra-plugin";
/// The ConfigMap in the operator's namespace that holds what both fences allow (`config/rbac/fence_params.yaml`).
pub const FENCE_PARAMS: &str = "neuron-dra-fence";

/// The policy as the install ships it; the Helm chart and the OLM instructions carry the same file.
static INSTALLED: LazyLock<ValidatingAdmissionPolicy> = LazyLock::new(|| {
    serde_yaml::from_str(include_str!("../../config/rbac/plugin_fence.yaml")).expect("the shipped fence parses")
});

/// The plugin's fence as installed, or why the plugin may not run: one line naming the object and what is wrong.
pub fn judge(
    policy: Option<&ValidatingAdmissionPolicy>,
    binding: Option<&ValidatingAdmissionPolicyBinding>,
) -> Result<(), String> {
    let policy = policy.ok_or_else(|| format!("ValidatingAdmissionPolicy {PLUGIN_FENCE} is missing"))?;
    let binding = binding.ok_or_else(|| format!("ValidatingAdmissionPolicyBinding {PLUGIN_FENCE} is missing"))?;
    if let Some(difference) = policy_difference(policy, &INSTALLED) {
        return Err(format!(
            "ValidatingAdmissionPolicy {PLUGIN_FENCE} is not the one installed with the operator ({difference} differ)"
        ));
    }
    binding_problem(binding).map_or(Ok(()), |problem| Err(format!("ValidatingAdmissionPolicyBinding {PLUGIN_FENCE} {problem}")))
}

/// The first part of `live` that refuses differently from `installed`, if any. Fields the API server defaults are
/// compared as it defaults them.
fn policy_difference(live: &ValidatingAdmissionPolicy, installed: &ValidatingAdmissionPolicy) -> Option<&'static str> {
    let (Some(live), Some(installed)) = (&live.spec, &installed.spec) else {
        return Some("its spec");
    };
    let fail = |policy: &Option<String>| policy.as_deref().unwrap_or("Fail") == "Fail";
    let conditions = |c: &Option<Vec<_>>| c.clone().unwrap_or_default();
    if !fail(&live.failure_policy) {
        Some("failurePolicy")
    } else if live.validations != installed.validations {
        Some("validations")
    } else if live.variables != installed.variables {
        Some("variables")
    } else if conditions(&live.match_conditions) != conditions(&installed.match_conditions) {
        Some("matchConditions")
    } else if live.param_kind != installed.param_kind {
        Some("paramKind")
    } else if !same_match(live.match_constraints.as_ref(), installed.match_constraints.as_ref()) {
        Some("matchConstraints")
    } else {
        None
    }
}

/// Whether two policies match the same requests: the same rules, nothing excluded, no selector narrowing them.
fn same_match(live: Option<&MatchResources>, installed: Option<&MatchResources>) -> bool {
    let rules = |m: Option<&MatchResources>| -> Vec<(Vec<String>, Vec<String>, Vec<String>, Vec<String>)> {
        let rules = m.and_then(|m| m.resource_rules.clone()).unwrap_or_default();
        rules.iter().map(rule_key).collect()
    };
    rules(live) == rules(installed) && live.is_none_or(matches_everything_it_names)
}

fn rule_key(rule: &NamedRuleWithOperations) -> (Vec<String>, Vec<String>, Vec<String>, Vec<String>) {
    let list = |l: &Option<Vec<String>>| l.clone().unwrap_or_default();
    (list(&rule.api_groups), list(&rule.api_versions), list(&rule.operations), list(&rule.resources))
}

/// No exclusions, no namespace or object selector, every scope, and the `Equivalent` match policy (requests in
/// another version of the same resource are matched too).
fn matches_everything_it_names(m: &MatchResources) -> bool {
    let empty_selector = |s: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>| {
        s.as_ref().is_none_or(|s| s.match_labels.as_ref().is_none_or(|l| l.is_empty()) && s.match_expressions.as_ref().is_none_or(|e| e.is_empty()))
    };
    let every_scope = m
        .resource_rules
        .iter()
        .flatten()
        .all(|rule| rule.scope.as_deref().is_none_or(|scope| scope == "*"));
    m.exclude_resource_rules.as_ref().is_none_or(|rules| rules.is_empty())
        && empty_selector(&m.namespace_selector)
        && empty_selector(&m.object_selector)
        && m.match_policy.as_deref().is_none_or(|policy| policy == "Equivalent")
        && every_scope
}

/// What is wrong with the binding, if anything: it must apply the fence, everywhere, denying, with the install's
/// parameters (and deny when they are missing).
fn binding_problem(binding: &ValidatingAdmissionPolicyBinding) -> Option<String> {
    let Some(spec) = &binding.spec else { return Some("has no spec".into()) };
    if spec.policy_name.as_deref() != Some(PLUGIN_FENCE) {
        return Some(format!("binds {} instead of {PLUGIN_FENCE}", spec.policy_name.as_deref().unwrap_or("nothing")));
    }
    let actions = spec.validation_actions.clone().unwrap_or_default();
    if !actions.iter().any(|a| a == "Deny") {
        return Some(format!("does not deny (validationActions: [{}])", actions.join(", ")));
    }
    if spec.match_resources.as_ref().is_some_and(|m| {
        !matches_everything_it_names(m) || m.resource_rules.as_ref().is_some_and(|rules| !rules.is_empty())
    }) {
        return Some("narrows what the fence matches (matchResources)".into());
    }
    let params = spec.param_ref.as_ref();
    if params.and_then(|p| p.name.as_deref()) != Some(FENCE_PARAMS) {
        return Some(format!("does not take its parameters from ConfigMap {FENCE_PARAMS} (paramRef)"));
    }
    if params.and_then(|p| p.parameter_not_found_action.as_deref()) != Some("Deny") {
        return Some("lets plugin writes through when its parameters are missing (parameterNotFoundAction)".into());
    }
    None
}

/// The fence as the install ships it, with its binding: for tests and for the devtools that render an install.
pub fn installed() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let binding = serde_yaml::from_str(include_str!("../../config/rbac/plugin_fence_binding.yaml"))
        .expect("the shipped fence binding parses");
    (INSTALLED.clone(), binding)
}

#[cfg(test)]
mod tests;
