//! A simulated Trainium fleet of one test: node groups (one per instance type, or per name), a stand-in kubelet,
//! and the config that selects exactly these nodes.

#![allow(dead_code)]

use neuron_dra_operator::api::NeuronDRAConfigStatus;
use neuron_dra_operator::devtools::simulate::fleet::{self, FleetSpec, SIMULATED_LABEL};
use neuron_dra_operator::devtools::simulate::{self, FaultKind, TaintEffect};
use serde_json::{Value, json};

use super::scenario::Scenario;

/// Nodes of one instance type; `name` tells apart two groups of one type (e.g. another host driver version).
#[derive(Clone, Debug)]
pub struct NodeGroup {
    pub name: String,
    pub instance_type: String,
    pub count: usize,
    pub neuron_driver_version: String,
}

impl NodeGroup {
    pub fn new(instance_type: &str, count: usize) -> NodeGroup {
        NodeGroup {
            name: instance_type.replace('.', "-"),
            instance_type: instance_type.into(),
            count,
            neuron_driver_version: fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
        }
    }

    pub fn named(self, name: &str) -> NodeGroup {
        NodeGroup { name: name.into(), ..self }
    }

    pub fn neuron_driver(self, version: &str) -> NodeGroup {
        NodeGroup { neuron_driver_version: version.into(), ..self }
    }
}

/// The simulated nodes of one test, every group labelled `neurondra.io/simulated=<test id>-<group>`.
pub struct Fleet {
    pub scenario: Scenario,
    pub groups: Vec<NodeGroup>,
    kubelet: tokio::task::JoinHandle<()>,
}

impl Fleet {
    /// One group per instance type.
    pub async fn start(name: &str, fleets: &[(&str, usize)]) -> Fleet {
        let groups: Vec<NodeGroup> = fleets.iter().map(|(t, n)| NodeGroup::new(t, *n)).collect();
        Fleet::with_groups(name, &groups).await
    }

    pub async fn with_groups(name: &str, groups: &[NodeGroup]) -> Fleet {
        Fleet::start_with(name, groups, false).await
    }

    /// Like `with_groups`, with the stand-in kubelet also playing the plugin: each plugin pod that starts publishes
    /// its node's slice from its image tag (and a `-notready` or `-fewer` tag misbehaves).
    pub async fn with_plugin(name: &str, groups: &[NodeGroup]) -> Fleet {
        Fleet::start_with(name, groups, true).await
    }

    /// One group per instance type, and no operator: for what the API server and the scheduler do with objects a
    /// test applies itself.
    pub async fn without_operator(name: &str, fleets: &[(&str, usize)]) -> Fleet {
        let groups: Vec<NodeGroup> = fleets.iter().map(|(t, n)| NodeGroup::new(t, *n)).collect();
        Fleet::with_scenario(Scenario::new(name).await, &groups, false).await
    }

    async fn start_with(name: &str, groups: &[NodeGroup], plugin: bool) -> Fleet {
        Fleet::with_scenario(Scenario::with_operator(name).await, groups, plugin).await
    }

    async fn with_scenario(scenario: Scenario, groups: &[NodeGroup], plugin: bool) -> Fleet {
        for group in groups {
            let spec = FleetSpec {
                prefix: format!("{}-{}", scenario.id, group.name),
                count: group.count,
                instance_type: group.instance_type.clone(),
                dra_driver_version: fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
                neuron_driver_version: group.neuron_driver_version.clone(),
                kubelet_version: fleet::DEFAULT_KUBELET_VERSION.into(),
            };
            simulate::create_fleet(&scenario.client, &spec).await.unwrap();
        }
        let client = scenario.client.clone();
        let kubelet = tokio::spawn(async move {
            let _ = simulate::kubelet_with(client, plugin).await;
        });
        Fleet { scenario, groups: groups.to_vec(), kubelet }
    }

    /// Node `index` of the group named `group` (by default the instance type).
    pub fn node(&self, group: &str, index: usize) -> String {
        format!("{}-{}-{index}", self.scenario.id, group.replace('.', "-"))
    }

    pub fn prefixes(&self) -> Vec<String> {
        self.groups.iter().map(|g| format!("{}-{}", self.scenario.id, g.name)).collect()
    }

    /// A label selector (config) matching exactly this fleet's nodes.
    pub fn node_selector(&self) -> Value {
        json!({"matchExpressions": [{"key": SIMULATED_LABEL, "operator": "In", "values": self.prefixes()}]})
    }

    /// A pod affinity keeping a workload pod on this fleet's nodes.
    pub fn pod_affinity(&self) -> Value {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": SIMULATED_LABEL, "operator": "In", "values": self.prefixes()}]}
        ]}}})
    }

    /// A config named after the test that selects this fleet, with `profiles`.
    pub async fn apply_profiles(&self, profiles: Value, driver_image: Option<&str>) -> String {
        let s = &self.scenario;
        let mut spec = json!({"nodeSelector": self.node_selector(), "profiles": profiles});
        if let Some(image) = driver_image {
            spec["driver"] = json!({"image": image});
        }
        s.apply(&s.config(&s.id, spec)).await.unwrap();
        s.id.clone()
    }

    /// Waits until the status satisfies `check` (status of the current generation).
    pub async fn wait_status(
        &self,
        what: &str,
        check: impl Fn(&NeuronDRAConfigStatus) -> bool,
    ) -> NeuronDRAConfigStatus {
        self.scenario.wait_status(what, check).await
    }

    pub async fn fault(&self, kind: FaultKind, node: &str, effect: TaintEffect) {
        simulate::fault(&self.scenario.client, kind, node, None, effect).await.unwrap();
    }

    pub async fn taint_device(&self, node: &str, device: &str, effect: TaintEffect) {
        simulate::fault(&self.scenario.client, FaultKind::Taint, node, Some(device), effect).await.unwrap();
    }

    /// Removes the fleet (and the pods the kubelet ran on it) and stops the kubelet.
    pub async fn clear(&self) {
        for prefix in self.prefixes() {
            simulate::clear(&self.scenario.client, Some(&prefix)).await.unwrap();
        }
        self.kubelet.abort();
    }

    /// Deletes a workload pod and waits until it is gone (its claim is then released).
    pub async fn delete_pod(&self, namespace: &str, name: &str) {
        self.scenario.delete_pod(namespace, name).await;
    }
}
