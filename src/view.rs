//! Compact views of the objects the operator watches by the thousand (Nodes, ResourceSlices, plugin Pods): only the
//! fields health and node selection read are deserialized and cached. A full k8s-openapi ResourceSlice costs ~25 KiB
//! in memory (every device carries a map of attributes); its view costs ~2 KiB, which keeps 5,000 nodes under the
//! memory target.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceTaint, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// Drops what no view reads from an object's metadata.
pub fn trim_meta<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
}

/// A bound pod's node is its nodeName; the affinity that pinned it is no longer needed.
pub fn trim_pod(pod: &mut PodView) {
    trim_meta(pod);
    if pod.spec.node_name.is_some() {
        pod.spec.affinity = None;
    }
}

/// A ResourceSlice: driver, node, pool and, per device, its name, taints and the attributes health reads.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "ResourceSlice")]
pub struct SliceView {
    pub metadata: ObjectMeta,
    pub spec: SliceSpecView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SliceSpecView {
    pub driver: String,
    #[serde(default)]
    pub node_name: Option<String>,
    pub pool: PoolView,
    #[serde(default)]
    pub devices: Vec<DeviceView>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct PoolView {
    pub name: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct DeviceView {
    pub name: String,
    #[serde(default)]
    pub taints: Vec<DeviceTaint>,
    #[serde(default)]
    pub attributes: KeptAttributes,
}

/// The device attributes health and capacity read, as their plain values; every other attribute is skipped while
/// parsing. (Serialized as plain values too: views are never written back.) The strings are the same on thousands
/// of devices (a type, a version), so each distinct value is stored once (`Shared`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct KeptAttributes {
    pub device_id: Option<i64>,
    pub resource_type: Option<Shared>,
    pub dra_driver_version: Option<Shared>,
    pub instance_type: Option<Shared>,
    pub neuron_driver_version: Option<Shared>,
    /// `resource.aws.com/devicegroup{1,4,8,16}_id`, in that order, as hashes: they are only ever compared, and a
    /// number costs neither an allocation per device nor a string comparison per lookup.
    pub device_groups: [Option<GroupId>; 4],
    /// The EFA driver's `pciDevice` (what its DeviceClass selects on).
    pub pci_device: Option<Shared>,
}

/// A string many devices share, held once per process: a device's view is then a few pointers instead of five
/// heap strings, which at 20 devices and interfaces per node is most of the operator's memory.
pub type Shared = std::sync::Arc<str>;

/// The one copy of `value`. Distinct values are few (types, versions); past `LIMIT` of them (a driver publishing
/// something unexpected) values are no longer pooled, so the pool cannot grow without bound.
fn shared(value: Option<String>) -> Option<Shared> {
    use std::collections::HashSet;
    use std::sync::{LazyLock, Mutex};
    const LIMIT: usize = 1024;
    static POOL: LazyLock<Mutex<HashSet<Shared>>> = LazyLock::new(Mutex::default);
    let value = value?;
    let mut pool = POOL.lock().expect("not poisoned");
    if let Some(known) = pool.get(value.as_str()) {
        return Some(known.clone());
    }
    let new: Shared = value.into();
    if pool.len() < LIMIT {
        pool.insert(new.clone());
    }
    Some(new)
}

/// A connected-group id (`devicegroup<N>_id`), hashed. Ids are compared only within one node, whose few dozen ids
/// a 64-bit hash tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct GroupId(std::num::NonZeroU64); // non-zero: an `Option<GroupId>` takes 8 bytes, not 16

impl GroupId {
    pub fn of(id: &str) -> GroupId {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: the same id hashes the same in every process.
        let mut hasher = std::hash::DefaultHasher::new();
        id.hash(&mut hasher);
        GroupId(std::num::NonZeroU64::new(hasher.finish()).unwrap_or(std::num::NonZeroU64::MIN))
    }
}

/// The connected-group sizes the drivers publish ids for, in `KeptAttributes::device_groups` order.
pub const DEVICE_GROUP_SIZES: [u32; 4] = [1, 4, 8, 16];

/// A device attribute value as the API writes it (one of int, string, version).
#[derive(Deserialize)]
struct Attribute {
    #[serde(default)]
    int: Option<i64>,
    #[serde(default)]
    string: Option<String>,
    #[serde(default)]
    version: Option<String>,
}

impl<'de> Deserialize<'de> for KeptAttributes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Kept;
        impl<'de> Visitor<'de> for Kept {
            type Value = KeptAttributes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of device attributes")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeptAttributes, A::Error> {
                let mut kept = KeptAttributes::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "deviceId" => kept.device_id = map.next_value::<Attribute>()?.int,
                        "resourceType" => kept.resource_type = shared(map.next_value::<Attribute>()?.string),
                        "draDriverVersion" => kept.dra_driver_version = shared(map.next_value::<Attribute>()?.version),
                        "instanceType" => kept.instance_type = shared(map.next_value::<Attribute>()?.string),
                        "neuronDriverVersion" => {
                            kept.neuron_driver_version = shared(map.next_value::<Attribute>()?.string)
                        }
                        "resource.aws.com/devicegroup1_id" => {
                            kept.device_groups[0] = map.next_value::<Attribute>()?.string.as_deref().map(GroupId::of)
                        }
                        "resource.aws.com/devicegroup4_id" => {
                            kept.device_groups[1] = map.next_value::<Attribute>()?.string.as_deref().map(GroupId::of)
                        }
                        "resource.aws.com/devicegroup8_id" => {
                            kept.device_groups[2] = map.next_value::<Attribute>()?.string.as_deref().map(GroupId::of)
                        }
                        "resource.aws.com/devicegroup16_id" => {
                            kept.device_groups[3] = map.next_value::<Attribute>()?.string.as_deref().map(GroupId::of)
                        }
                        "dra.net/pciDevice" | "pciDevice" => {
                            kept.pci_device = shared(map.next_value::<Attribute>()?.string)
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(kept)
            }
            fn visit_unit<E>(self) -> Result<KeptAttributes, E> {
                Ok(KeptAttributes::default())
            }
        }
        deserializer.deserialize_any(Kept)
    }
}

impl DeviceView {
    pub fn device_id(&self) -> Option<i64> {
        self.attributes.device_id
    }
    pub fn resource_type(&self) -> Option<&str> {
        self.attributes.resource_type.as_deref()
    }
    pub fn dra_driver_version(&self) -> Option<&str> {
        self.attributes.dra_driver_version.as_deref()
    }
    /// The id of the connected group of `size` devices this device belongs to.
    pub fn device_group(&self, size: u32) -> Option<GroupId> {
        let index = DEVICE_GROUP_SIZES.iter().position(|s| *s == size)?;
        self.attributes.device_groups[index]
    }
}

/// A ResourceClaim: its labels (generated claims carry their template's) and what it holds now: the allocated
/// devices and the pods that reserve it. Every claim in the cluster is cached, so only this much is kept.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "ResourceClaim")]
pub struct ClaimView {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: ClaimStatusView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatusView {
    #[serde(default)]
    pub allocation: Option<AllocationView>,
    #[serde(default)]
    pub reserved_for: Vec<ConsumerView>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct AllocationView {
    #[serde(default)]
    pub devices: AllocatedDevicesView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct AllocatedDevicesView {
    #[serde(default)]
    pub results: Vec<AllocatedDeviceView>,
}

/// One allocated device: its driver, pool (the node, for node-local drivers) and name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllocatedDeviceView {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ConsumerView {
    #[serde(default)]
    pub resource: String,
    pub name: String,
}

impl ClaimView {
    /// The devices the claim holds (none when it is not allocated).
    pub fn devices(&self) -> &[AllocatedDeviceView] {
        self.status.allocation.as_ref().map(|a| a.devices.results.as_slice()).unwrap_or_default()
    }

    /// The pods that reserve the claim, as `namespace/name`.
    pub fn pods(&self) -> Vec<String> {
        let namespace = self.metadata.namespace.as_deref().unwrap_or_default();
        self.status
            .reserved_for
            .iter()
            .filter(|c| c.resource == "pods")
            .map(|c| format!("{namespace}/{}", c.name))
            .collect()
    }
}

/// A Node: labels (in metadata) and what its kubelet and node problem detector report.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "Node")]
pub struct NodeView {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: NodeStatusView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatusView {
    /// Only the keys are read (the legacy device plugin's resources).
    #[serde(default, deserialize_with = "keys_only")]
    pub allocatable: Vec<String>,
    #[serde(default)]
    pub conditions: Vec<ConditionView>,
    #[serde(default)]
    pub node_info: NodeInfoView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    /// When the status last changed: remediation serves the oldest problem first.
    #[serde(default, rename = "lastTransitionTime", skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfoView {
    #[serde(default)]
    pub kubelet_version: String,
}

fn keys_only<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let map: Option<BTreeMap<String, IgnoredAny>> = Option::deserialize(deserializer)?;
    Ok(map.map(|m| m.into_keys().collect()).unwrap_or_default())
}

/// A kubelet-plugin Pod: labels, the node it runs on (or is pinned to) and whether it is Ready.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "Pod")]
pub struct PodView {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodSpecView,
    #[serde(default)]
    pub status: PodStatusView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView {
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub affinity: Option<k8s_openapi::api::core::v1::Affinity>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct PodStatusView {
    #[serde(default)]
    pub conditions: Vec<ConditionView>,
}

impl PodView {
    pub fn ready(&self) -> bool {
        self.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    }

    /// The node it runs on, or (unbound) the one its DaemonSet affinity pins it to.
    pub fn node(&self) -> Option<String> {
        if let Some(node) = &self.spec.node_name {
            return Some(node.clone());
        }
        crate::nodes::pinned_node(self.spec.affinity.as_ref()?)
    }
}

/// A view from a full object (tests, the simulator): through its JSON form, as the watch would.
pub fn view_of<Full: Serialize, View: serde::de::DeserializeOwned>(full: &Full) -> View {
    serde_json::from_value(serde_json::to_value(full).expect("serializes")).expect("a view reads any full object")
}

/// Views of the full kinds, for tests.
pub fn slice_view(slice: &ResourceSlice) -> SliceView {
    view_of(slice)
}
pub fn node_view(node: &Node) -> NodeView {
    view_of(node)
}
pub fn pod_view(pod: &Pod) -> PodView {
    view_of(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::fleet::{self, FleetSpec};

    fn fleet() -> FleetSpec {
        FleetSpec {
            prefix: "v".into(),
            count: 1,
            instance_type: "trn2u.48xlarge".into(),
            dra_driver_version: "1.1.0".into(),
            neuron_driver_version: "2.25.4.0".into(),
            kubelet_version: "v1.34.2".into(),
        }
    }

    #[test]
    fn a_slice_view_keeps_names_taints_and_three_attributes() {
        let mut slice = fleet::resource_slice(&fleet(), 0, Some("uid".into()));
        slice.spec.devices.as_mut().unwrap()[2].taints =
            Some(vec![DeviceTaint { key: "k".into(), effect: "NoExecute".into(), value: None, time_added: None }]);
        let view = slice_view(&slice);
        assert_eq!(view.spec.driver, "neuron.aws.com");
        assert_eq!(view.spec.pool.name, "v-0");
        assert_eq!(view.spec.devices.len(), 17);
        assert_eq!(view.spec.devices[2].taints[0].key, "k");
        assert_eq!(view.spec.devices[5].device_id(), Some(5));
        assert_eq!(view.spec.devices[5].resource_type(), Some("neuron_device"));
        assert_eq!(view.spec.devices[16].resource_type(), Some("neuron_node"));
        assert_eq!(view.spec.devices[0].dra_driver_version(), Some("1.1.0"));
    }

    #[test]
    fn the_strings_devices_share_are_held_once() {
        let first = slice_view(&fleet::resource_slice(&fleet(), 0, None));
        let second = slice_view(&fleet::resource_slice(&fleet(), 1, None));
        let (a, b) = (&first.spec.devices[0].attributes, &second.spec.devices[3].attributes);
        for (x, y) in [(&a.instance_type, &b.instance_type), (&a.dra_driver_version, &b.dra_driver_version)] {
            let (x, y) = (x.as_ref().unwrap(), y.as_ref().unwrap());
            assert!(std::sync::Arc::ptr_eq(x, y), "{x} is one allocation for every device");
        }
        assert_eq!(std::mem::size_of::<Option<GroupId>>(), 8);
    }

    #[test]
    fn a_node_view_keeps_labels_allocatable_keys_conditions_and_kubelet_version() {
        let mut node = fleet::node(&fleet(), 0);
        node.status = Some(serde_json::from_value(fleet::node_status(&fleet())).unwrap());
        let view = node_view(&node);
        assert_eq!(view.metadata.labels.unwrap()["node.kubernetes.io/instance-type"], "trn2u.48xlarge");
        assert!(view.status.allocatable.contains(&"cpu".to_string()));
        assert_eq!(view.status.conditions[0].type_, "Ready");
        assert_eq!(view.status.node_info.kubelet_version, "v1.34.2");
    }
}
