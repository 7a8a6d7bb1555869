//! The fence around the kubelet plugin: a ValidatingAdmissionPolicy and its binding that let the plugin's
//! ServiceAccount create, update and delete only the ResourceSlices of the node its pod runs on.
//!
//! RBAC cannot say "your own node's slices": the plugin's ClusterRole grants ResourceSlice writes cluster-wide, so
//! one compromised node could rewrite every other node's devices. A token the kubelet mounts into a pod is bound to
//! that pod, and the API server adds the pod's node to the request's user info as the extra
//! `authentication.kubernetes.io/node-name` (Kubernetes 1.32+: ServiceAccountTokenPodNodeInfo). The policy compares
//! it with the slice's `spec.nodeName` (docs/neuron-driver.md, "The plugin's fence").

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use serde_json::json;

use super::driver::plugin_name;
use super::owned_meta;
use crate::logic::validate::ValidatedConfig;

/// The user-info extra that names the node of the pod a token is bound to.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// The policy, matching only requests of this config's plugin ServiceAccount.
pub fn admission_policy(config: &ValidatedConfig) -> ValidatingAdmissionPolicy {
    let user = format!("system:serviceaccount:{}:{}", config.spec.driver.namespace, plugin_name(&config.name));
    let spec = json!({
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["resourceslices"],
        }]},
        "matchConditions": [{"name": "plugin-service-account", "expression": format!("request.userInfo.username == '{user}'")}],
        "variables": [
            {"name": "tokenNode",
             "expression": format!("request.userInfo.extra[?'{NODE_NAME_EXTRA}'][0].orValue('')")},
            // The slice as it will be, or (on delete) as it was; its nodeName cannot change on update.
            {"name": "sliceNode",
             "expression": "(request.operation == 'DELETE' ? oldObject : object).spec.?nodeName.orValue('')"},
        ],
        "validations": [
            {"expression": "variables.tokenNode != ''",
             "message": "the kubelet plugin's token names no node: it must be the token of a pod scheduled to a node",
             "reason": "Forbidden"},
            {"expression": "variables.sliceNode == variables.tokenNode",
             "messageExpression": "'the kubelet plugin on node ' + variables.tokenNode + ' may only write the ResourceSlices of its own node'",
             "reason": "Forbidden"},
        ],
    });
    ValidatingAdmissionPolicy {
        metadata: owned_meta(config, &plugin_name(&config.name), None),
        spec: Some(serde_json::from_value(spec).expect("a well-formed policy")),
        status: None,
    }
}

/// Binds the policy cluster-wide, denying what it refuses.
pub fn admission_policy_binding(config: &ValidatedConfig) -> ValidatingAdmissionPolicyBinding {
    let name = plugin_name(&config.name);
    let spec = json!({"policyName": name, "validationActions": ["Deny"]});
    ValidatingAdmissionPolicyBinding {
        metadata: owned_meta(config, &name, None),
        spec: Some(serde_json::from_value(spec).expect("a well-formed binding")),
    }
}
