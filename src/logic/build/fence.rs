//! The fence around the kubelet plugin: a ValidatingAdmissionPolicy and its binding that let the plugin's
//! ServiceAccount write only what belongs to the node its pod runs on: that node's ResourceSlices (of driver
//! `neuron.aws.com`, in a pool named after the node) and that Node (labels, and conditions through `nodes/status`).
//!
//! RBAC cannot say "your own node": the plugin's ClusterRole grants ResourceSlice and Node writes cluster-wide (AWS's
//! chart grants them; docs/neuron-driver.md), so one compromised node could rewrite every other node's devices, or
//! taint, relabel and set conditions on every other Node. The NodeRestriction admission plugin limits kubelets
//! (`system:node:<name>`) this way, but not ServiceAccount tokens. A token the kubelet mounts into a pod is bound
//! to that pod, and the API server adds the pod's node to the request's user info as the extra
//! `authentication.kubernetes.io/node-name` (Kubernetes 1.32+: ServiceAccountTokenPodNodeInfo). The policy compares
//! it with the slice's `spec.nodeName` and `spec.pool.name`, and with the Node's name (docs/neuron-driver.md, "The
//! plugin's fence").

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use serde_json::json;

use super::NEURON_DRIVER;
use super::driver::plugin_name;
use super::owned_meta;
use crate::logic::validate::ValidatedConfig;

/// The user-info extra that names the node of the pod a token is bound to.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// The policy, matching only requests of this config's plugin ServiceAccount.
pub fn admission_policy(config: &ValidatedConfig) -> ValidatingAdmissionPolicy {
    let user = format!("system:serviceaccount:{}:{}", config.spec.driver.namespace, plugin_name(&config.name));
    // Each rule after the first concerns one kind; `||` short-circuits, so a slice's rule never reads a Node's
    // fields and the other way round.
    let slice_rule = |expression: &str| format!("!variables.isSlice || {expression}");
    let spec = json!({
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [
            {"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
             "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["resourceslices"]},
            // The Node itself (labels, taints, annotations) and its status (conditions): all the plugin may write.
            {"apiGroups": [""], "apiVersions": ["*"],
             "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["nodes", "nodes/status"]},
        ]},
        "matchConditions": [{"name": "plugin-service-account", "expression": format!("request.userInfo.username == '{user}'")}],
        "variables": [
            {"name": "tokenNode",
             "expression": format!("request.userInfo.extra[?'{NODE_NAME_EXTRA}'][0].orValue('')")},
            {"name": "isSlice", "expression": "request.resource.resource == 'resourceslices'"},
            // The object as it will be, or (on delete) as it was. A slice's nodeName cannot change on update.
            {"name": "target", "expression": "request.operation == 'DELETE' ? oldObject : object"},
        ],
        "validations": [
            {"expression": "variables.tokenNode != ''",
             "message": "the kubelet plugin's token names no node: it must be the token of a pod scheduled to a node",
             "reason": "Forbidden"},
            {"expression": slice_rule("variables.target.spec.?nodeName.orValue('') == variables.tokenNode"),
             "messageExpression": "'the kubelet plugin on node ' + variables.tokenNode + ' may only write the ResourceSlices of its own node'",
             "reason": "Forbidden"},
            {"expression": slice_rule(&format!("variables.target.spec.driver == '{NEURON_DRIVER}'")),
             "messageExpression": format!("'the kubelet plugin on node ' + variables.tokenNode + ' may only publish ResourceSlices of driver {NEURON_DRIVER}'"),
             "reason": "Forbidden"},
            {"expression": slice_rule("variables.target.spec.pool.name == variables.tokenNode"),
             "messageExpression": "'the kubelet plugin on node ' + variables.tokenNode + ' may only publish the pool named after its node'",
             "reason": "Forbidden"},
            {"expression": "variables.isSlice || variables.target.metadata.name == variables.tokenNode",
             "messageExpression": "'the kubelet plugin on node ' + variables.tokenNode + ' may only write its own Node'",
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
