//! fence (pure): whether the kubelet plugin's fences are in place as the install ships them. The operator starts or
//! changes a plugin DaemonSet only when they are: a plugin whose fence was deleted, set to warn only, or rewritten
//! could write every node's devices and Nodes (docs/security.md).
//!
//! The fences are installed with the operator (config/rbac/plugin_fence.yaml and its bindings), never written by
//! it: the operator may only read them, by name. The API server adds defaults to what it stores, so a fence is
//! judged by what the shipped file sets (every field of it, with the same value; lists of the same length) and by
//! the fields that would narrow it, which the file leaves out and must stay empty. The variables the install sets
//! (`INSTALL_VARIABLES`: the driver namespaces, image repositories, kubelet directories and operator) may differ; the operator reads
//! its allow-list from them.

use serde_json::Value;

use crate::api::DriverSpec;

/// The shipped policies, in order: what a plugin may write, and who may start one.
const POLICIES: &str = include_str!("../../../config/rbac/plugin_fence.yaml");
const BINDINGS: &str = include_str!("../../../config/rbac/plugin_fence_binding.yaml");

/// The policy variables whose expressions the install sets (a list of strings each), not the shipped file.
pub const INSTALL_VARIABLES: [&str; 5] =
    ["namespacePatterns", "imagePatterns", "operators", "kubeletDirs", "tokenMinters"];

/// One fence as read from the server: the policy and the binding of its name (None when missing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    pub policy: Option<Value>,
    pub binding: Option<Value>,
}

/// The names of the fences, each its policy's and its binding's.
pub fn names() -> Vec<String> {
    shipped(POLICIES).iter().map(|policy| name_of(policy).to_string()).collect()
}

/// When every fence in `found` (in the order of `names`) is in place as shipped, what the install allows a plugin
/// (read from the fences' install variables); otherwise one line that says which fence is not, and how to restore
/// it.
pub fn judge(found: &[Found]) -> Result<Allowed, String> {
    let policies = shipped(POLICIES);
    let bindings = shipped(BINDINGS);
    let mut allowed = Allowed::default();
    for ((expected_policy, expected_binding), found) in policies.iter().zip(&bindings).zip(found) {
        let name = name_of(expected_policy);
        match judge_one(expected_policy, expected_binding, found) {
            Ok(Some(install)) => allowed = install,
            Ok(None) => {}
            Err(problem) => {
                return Err(format!(
                    "the kubelet plugin's fence {name} {problem}: the plugin DaemonSet is neither created nor \
                     changed until the fence is restored (apply the operator's install again, docs/install.md)"
                ));
            }
        }
    }
    Ok(allowed)
}

/// The install variables of a policy's spec, by name: their expressions as lists of strings.
fn install_variables(spec: &Value) -> Result<Vec<(String, Vec<String>)>, String> {
    let variables = spec["variables"].as_array().cloned().unwrap_or_default();
    let mut found = Vec::new();
    for variable in variables {
        let name = variable["name"].as_str().unwrap_or_default();
        if INSTALL_VARIABLES.contains(&name) {
            let expression = variable["expression"].as_str().unwrap_or_default();
            let list = string_list(expression)
                .ok_or_else(|| format!("sets variable {name} to {expression:?}, not a list of strings"))?;
            found.push((name.to_string(), list));
        }
    }
    Ok(found)
}

/// `spec` with the install variables' expressions blanked: what the shipped file fixes.
fn fixed_part(spec: &Value) -> Value {
    let mut spec = spec.clone();
    for variable in spec["variables"].as_array_mut().into_iter().flatten() {
        if variable["name"].as_str().is_some_and(|name| INSTALL_VARIABLES.contains(&name)) {
            variable["expression"] = Value::String(String::new());
        }
    }
    spec
}

/// A CEL list of string literals (`['a', "b"]`), as the install writes it; None for anything else.
fn string_list(expression: &str) -> Option<Vec<String>> {
    let inner = expression.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner.is_empty() {
        return Some(Vec::new());
    }
    inner
        .split(',')
        .map(|item| {
            let item = item.trim();
            let quoted = |q: char| item.strip_prefix(q)?.strip_suffix(q).filter(|s| !s.contains(['\\', '\'', '"']));
            quoted('\'').or_else(|| quoted('"')).map(str::to_string)
        })
        .collect()
}

/// Ok with the install's allow-list when the policy declares one, or the problem.
fn judge_one(expected_policy: &Value, expected_binding: &Value, found: &Found) -> Result<Option<Allowed>, String> {
    let Some(policy) = &found.policy else {
        return Err("is missing (ValidatingAdmissionPolicy)".into());
    };
    let Some(binding) = &found.binding else {
        return Err("has no ValidatingAdmissionPolicyBinding".into());
    };
    if let Some(path) = differs(&fixed_part(&expected_policy["spec"]), &fixed_part(&policy["spec"]), "spec") {
        return Err(format!("is not the policy the operator ships ({path} differs)"));
    }
    if let Some(path) = narrowed(&policy["spec"]["matchConstraints"], "spec.matchConstraints") {
        return Err(format!("is narrowed ({path} is set)"));
    }
    if policy["spec"]["paramKind"].is_object() {
        return Err("is not the policy the operator ships (spec.paramKind is set)".into());
    }
    let variables = install_variables(&policy["spec"])?;
    // The plugin's allow-list is the policy that names the driver namespaces (neuron-dra-plugin-pods); the token
    // fence's variables are not one.
    let allowed = variables.iter().any(|(name, _)| name == "namespacePatterns").then(|| {
        let list = |name: &str| variables.iter().find(|(n, _)| n == name).map(|(_, l)| l.clone()).unwrap_or_default();
        Allowed {
            driver_namespaces: list("namespacePatterns"),
            image_repositories: list("imagePatterns"),
            kubelet_dirs: list("kubeletDirs"),
        }
    });
    judge_binding(expected_binding, binding).map_or(Ok(allowed), Err)
}

fn judge_binding(expected_binding: &Value, binding: &Value) -> Option<String> {
    let actions = binding["spec"]["validationActions"].as_array().cloned().unwrap_or_default();
    if !actions.iter().any(|a| a == "Deny") {
        return Some("is not enforced (its binding's validationActions lack Deny)".into());
    }
    let mut expected = expected_binding["spec"].clone();
    // Deny among any actions: checked apart.
    expected.as_object_mut().map(|spec| spec.remove("validationActions"));
    if let Some(path) = differs(&expected, &binding["spec"], "binding spec") {
        return Some(format!("is bound otherwise than shipped ({path} differs)"));
    }
    if let Some(path) = narrowed(&binding["spec"]["matchResources"], "binding spec.matchResources") {
        return Some(format!("is narrowed ({path} is set)"));
    }
    None
}

/// The first path where `found` lacks or changes what `expected` sets.
fn differs(expected: &Value, found: &Value, path: &str) -> Option<String> {
    match (expected, found) {
        (Value::Object(expected), Value::Object(found)) => expected
            .iter()
            .find_map(|(key, value)| differs(value, found.get(key).unwrap_or(&Value::Null), &format!("{path}.{key}"))),
        (Value::Array(expected), Value::Array(found)) if expected.len() == found.len() => {
            expected.iter().zip(found).enumerate().find_map(|(i, (e, f))| differs(e, f, &format!("{path}[{i}]")))
        }
        _ if expected == found => None,
        _ => Some(path.to_string()),
    }
}

/// The first field of a policy's `matchConstraints` (or a binding's `matchResources`) that would let requests the
/// shipped fence matches go past it: selectors, excluded rules, rules by name or scope, an exact match policy.
fn narrowed(resources: &Value, path: &str) -> Option<String> {
    let set = |value: &Value| match value {
        Value::Null => false,
        Value::Object(map) => map.values().any(|v| !v.is_null() && v != &Value::Array(vec![])),
        Value::Array(list) => !list.is_empty(),
        _ => true,
    };
    for selector in ["namespaceSelector", "objectSelector", "excludeResourceRules"] {
        if set(&resources[selector]) {
            return Some(format!("{path}.{selector}"));
        }
    }
    if resources["matchPolicy"].as_str().is_some_and(|policy| policy != "Equivalent") {
        return Some(format!("{path}.matchPolicy"));
    }
    let rules = resources["resourceRules"].as_array().cloned().unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        if set(&rule["resourceNames"]) {
            return Some(format!("{path}.resourceRules[{i}].resourceNames"));
        }
        if rule["scope"].as_str().is_some_and(|scope| scope != "*") {
            return Some(format!("{path}.resourceRules[{i}].scope"));
        }
    }
    None
}

/// What the install allows a plugin DaemonSet (the install variables of the fence `neuron-dra-plugin-pods`): the
/// fences refuse anything else at admission, so a config outside it is refused in its status first, before
/// anything is half-written. Empty lists are not checked here (the policies still are).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allowed {
    /// Namespace patterns: a name, `prefix*` or `*suffix`.
    pub driver_namespaces: Vec<String>,
    /// Image repositories: `R` allows `R:tag` and `R@digest`; `prefix*` allows any image that starts with prefix.
    pub image_repositories: Vec<String>,
    /// Kubelet root directories, exactly: the DaemonSet mounts `plugins` and `plugins_registry` below one.
    pub kubelet_dirs: Vec<String>,
}

impl Allowed {
    /// Why the install does not allow this driver, one line per field, as `(path, reason)`.
    pub fn refusals(&self, driver: &DriverSpec) -> Vec<(&'static str, String)> {
        let mut refusals = Vec::new();
        let namespaces = &self.driver_namespaces;
        if !namespaces.is_empty() && !namespaces.iter().any(|p| namespace_matches(p, &driver.namespace)) {
            refusals.push((
                "spec.driver.namespace",
                format!(
                    "{} is not a driver namespace this install allows ({}; the fences' namespacePatterns)",
                    driver.namespace,
                    namespaces.join(", ")
                ),
            ));
        }
        let images = &self.image_repositories;
        if !images.is_empty() && !images.iter().any(|r| image_matches(r, &driver.image)) {
            refusals.push((
                "spec.driver.image",
                format!(
                    "{} is not from a repository this install allows ({}; the fences' imagePatterns)",
                    driver.image,
                    images.join(", ")
                ),
            ));
        }
        let dirs = &self.kubelet_dirs;
        if !dirs.is_empty() && !dirs.contains(&driver.kubelet_dir) {
            refusals.push((
                "spec.driver.kubeletDir",
                format!(
                    "{} is not a kubelet directory this install allows ({}; the fences' kubeletDirs)",
                    driver.kubelet_dir,
                    dirs.join(", ")
                ),
            ));
        }
        refusals
    }
}

/// A namespace pattern as the policies read it: the name, `prefix*`, or `*suffix`.
pub fn namespace_matches(pattern: &str, namespace: &str) -> bool {
    match (pattern.strip_suffix('*'), pattern.strip_prefix('*')) {
        (Some(prefix), _) => namespace.starts_with(prefix),
        (None, Some(suffix)) => namespace.ends_with(suffix),
        (None, None) => pattern == namespace,
    }
}

/// An image repository as the operator's policy reads it: `R` is `R:tag` or `R@digest`, `prefix*` any image
/// starting with prefix.
pub fn image_matches(repository: &str, image: &str) -> bool {
    match repository.strip_suffix('*') {
        Some(prefix) => image.starts_with(prefix),
        None => image.strip_prefix(repository).is_some_and(|rest| rest.starts_with(':') || rest.starts_with('@')),
    }
}

fn shipped(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| serde::Deserialize::deserialize(document).expect("the shipped fence is valid YAML"))
        .filter(|value: &Value| !value.is_null())
        .collect()
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().expect("the shipped fence objects are named")
}

#[cfg(test)]
mod tests;
