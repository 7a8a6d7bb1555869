//! A node's problem, as the status lists it (`nodeIssues`) and a halted rollout names its failed nodes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A node's reason in `NodeIssue` (health) and in a halted rollout's `failedNodes`: its plugin pod is missing or not
/// Ready.
pub const PLUGIN_NOT_READY: &str = "PluginNotReady";

/// One node problem.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeIssue {
    pub node: String,
    /// A CamelCase reason such as NoResourceSlice or LegacyDevicePlugin.
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
