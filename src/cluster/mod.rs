//! Compact views of the objects the operator watches by the thousand (Nodes, ResourceSlices, plugin Pods, claims):
//! only what health, capacity, rollout and node selection read is parsed and cached. A full k8s-openapi
//! ResourceSlice of 16 devices costs ~25 KiB in memory (every device carries a map of attributes); its view under
//! 1 KiB, a pointer per device. Managed fields, annotations, owner references, labels nothing selects on and
//! conditions nothing reads are skipped while parsing (never built), and what thousands of devices share (names,
//! types, versions, whole devices alike on many nodes) is held once per process.

pub mod taint_rule;

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, LazyLock, Mutex};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceTaint, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// Drops what the operator never reads from an object's metadata (for kinds that are not views).
pub fn trim_meta<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
}

/// What a view keeps of an object's metadata: identity, generation, times and the labels `keep_label` names.
/// Managed fields, annotations and owner references (most of an object's bytes) are skipped while parsing, never
/// built.
fn slim_meta<'de, D: Deserializer<'de>>(deserializer: D, keep_label: fn(&str) -> bool) -> Result<ObjectMeta, D::Error> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kept {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        generation: Option<i64>,
        labels: Option<BTreeMap<String, String>>,
        creation_timestamp: Option<Time>,
        deletion_timestamp: Option<Time>,
    }
    let kept = Kept::deserialize(deserializer)?;
    let labels = kept.labels.map(|mut labels| {
        labels.retain(|key, _| keep_label(key));
        labels
    });
    Ok(ObjectMeta {
        name: kept.name,
        namespace: kept.namespace,
        uid: kept.uid,
        resource_version: kept.resource_version,
        generation: kept.generation,
        labels: labels.filter(|labels| !labels.is_empty()),
        creation_timestamp: kept.creation_timestamp,
        deletion_timestamp: kept.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

/// Metadata with every label (nodes and claims are selected by any label).
fn meta_with_labels<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    slim_meta(deserializer, |_| true)
}

/// Metadata without labels (a slice is found by driver and node, never by label).
fn meta_without_labels<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    slim_meta(deserializer, |_| false)
}

/// A plugin pod's metadata with the two labels read: its config and its DaemonSet revision.
fn plugin_pod_meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    slim_meta(deserializer, |key| {
        key == crate::logic::build::LABEL_CONFIG || key == crate::logic::rollout::REVISION_LABEL
    })
}

/// A bound pod's node is its nodeName; the affinity that pinned it is no longer needed. Its resourceVersion is read
/// by the watch alone, before the cache sees the pod (the uid stays: evictions are conditional on it).
pub fn trim_pod(pod: &mut PodView) {
    pod.metadata.resource_version = None;
    if pod.spec.node_name.is_some() {
        pod.spec.affinity = None;
    }
}

/// A ResourceSlice: driver, node, pool and, per device, its name, taints and the attributes health reads.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "ResourceSlice")]
pub struct SliceView {
    #[serde(deserialize_with = "meta_without_labels")]
    pub metadata: ObjectMeta,
    pub spec: SliceSpecView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SliceSpecView {
    #[serde(deserialize_with = "interned_str")]
    pub driver: Shared,
    #[serde(default)]
    pub node_name: Option<String>,
    pub pool: PoolView,
    /// Shared with every slice that publishes the same device (see `shared_devices`).
    #[serde(default, deserialize_with = "shared_devices")]
    pub devices: Vec<Arc<DeviceView>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct PoolView {
    pub name: String,
}

/// One published device in 64 bytes. A fleet of 10,000 nodes publishes 320,000 of them, mostly alike across nodes:
/// each distinct device is held once (see `shared_devices`), and its name and the attributes many devices share
/// are held once too.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct DeviceView {
    #[serde(deserialize_with = "interned_str")]
    pub name: Shared,
    /// Empty on a healthy device (an empty box does not allocate).
    #[serde(default, deserialize_with = "boxed_or_empty")]
    pub taints: Box<[DeviceTaint]>,
    #[serde(default)]
    pub attributes: KeptAttributes,
}

/// The device attributes health and capacity read; every other attribute is skipped while parsing. (Serialized
/// as plain values: views are never written back.)
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct KeptAttributes {
    /// `deviceId`; an id beyond 32 bits (no Neuron device has one) is treated as absent.
    pub device_id: Option<i32>,
    /// The attributes every device of a node (and of every node of the same type and versions) has alike.
    #[serde(flatten)]
    pub common: Arc<CommonAttributes>,
    /// `resource.aws.com/devicegroup{1,4,8,16}_id`, in that order, as hashes: they are only ever compared, and a
    /// number costs neither an allocation per device nor a string comparison per lookup.
    pub device_groups: [Option<GroupId>; 4],
}

/// Attributes thousands of devices share (a type, a version), held once per distinct combination.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq, Hash)]
pub struct CommonAttributes {
    pub resource_type: Option<Box<str>>,
    pub dra_driver_version: Option<Box<str>>,
    pub instance_type: Option<Box<str>>,
    pub neuron_driver_version: Option<Box<str>>,
    /// The EFA driver's `pciDevice` (what its DeviceClass selects on).
    pub pci_device: Option<Box<str>>,
}

/// A string many devices share (a device name repeats on every node of a type), held once per process.
pub type Shared = Arc<str>;

/// The one copy of `value` in `pool`. Distinct values are few (names, types, versions, the devices of an instance
/// type); past `limit` of them (a driver publishing something unexpected) values are no longer pooled, so a pool
/// cannot grow without bound.
fn interned<T: Eq + Hash + ?Sized>(
    pool: &Mutex<HashSet<Arc<T>>>,
    value: impl Borrow<T> + Into<Arc<T>>,
    limit: usize,
) -> Arc<T> {
    let mut pool = pool.lock().expect("not poisoned");
    if let Some(known) = pool.get(value.borrow()) {
        return known.clone();
    }
    let new: Arc<T> = value.into();
    if pool.len() < limit {
        pool.insert(new.clone());
    }
    new
}

fn shared_str(value: &str) -> Shared {
    static POOL: LazyLock<Mutex<HashSet<Shared>>> = LazyLock::new(Mutex::default);
    interned(&POOL, value, 4096)
}

fn shared_attributes(attributes: CommonAttributes) -> Arc<CommonAttributes> {
    static POOL: LazyLock<Mutex<HashSet<Arc<CommonAttributes>>>> = LazyLock::new(Mutex::default);
    interned(&POOL, attributes, 4096)
}

/// A slice's devices, each the one copy of that device in the process. Nodes of one instance type publish the same
/// devices (names, ids, group ids from the same PCI layout, versions), so a fleet of 10,000 nodes of one type holds
/// a few dozen devices and 8 bytes per device published instead of 64. A tainted device is its own copy: taints are
/// per node, few, and come and go. The pool holds at most 65,536 devices (~6 MiB), hundreds of distinct layouts.
fn shared_devices<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Arc<DeviceView>>, D::Error> {
    static POOL: LazyLock<Mutex<HashSet<Arc<DeviceView>>>> = LazyLock::new(Mutex::default);
    let devices = Option::<Vec<DeviceView>>::deserialize(deserializer)?.unwrap_or_default();
    let shared = |device: DeviceView| match device.taints.is_empty() {
        true => interned(&POOL, device, 65_536),
        false => Arc::new(device),
    };
    // Collected in place, the list would keep the parsed devices' 64 bytes each as spare room.
    let mut shared: Vec<_> = devices.into_iter().map(shared).collect();
    shared.shrink_to_fit();
    Ok(shared)
}

fn interned_str<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Shared, D::Error> {
    let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
    Ok(shared_str(&name))
}

fn boxed_or_empty<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Box<[DeviceTaint]>, D::Error> {
    Ok(Option::<Vec<DeviceTaint>>::deserialize(deserializer)?.unwrap_or_default().into_boxed_slice())
}

/// A connected-group id (`devicegroup<N>_id`), hashed. Ids are compared only within one node, whose few dozen ids
/// a 32-bit hash tells apart (two of 40 ids collide with odds of about one in five million).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct GroupId(std::num::NonZeroU32); // non-zero: an `Option<GroupId>` takes 4 bytes, not 8

impl GroupId {
    pub fn of(id: &str) -> GroupId {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: the same id hashes the same in every process.
        let mut hasher = std::hash::DefaultHasher::new();
        id.hash(&mut hasher);
        let hash = hasher.finish();
        GroupId(std::num::NonZeroU32::new((hash ^ (hash >> 32)) as u32).unwrap_or(std::num::NonZeroU32::MIN))
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
                let mut device_id = None;
                let mut common = CommonAttributes::default();
                let mut device_groups = [None; 4];
                let mut group = |map: &mut A, index: usize| -> Result<(), A::Error> {
                    device_groups[index] = map.next_value::<Attribute>()?.string.as_deref().map(GroupId::of);
                    Ok(())
                };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let boxed = |value: Option<String>| value.map(String::into_boxed_str);
                    match key.as_ref() {
                        "deviceId" => {
                            device_id = map.next_value::<Attribute>()?.int.and_then(|i| i32::try_from(i).ok())
                        }
                        "resourceType" => common.resource_type = boxed(map.next_value::<Attribute>()?.string),
                        "draDriverVersion" => common.dra_driver_version = boxed(map.next_value::<Attribute>()?.version),
                        "instanceType" => common.instance_type = boxed(map.next_value::<Attribute>()?.string),
                        "neuronDriverVersion" => {
                            common.neuron_driver_version = boxed(map.next_value::<Attribute>()?.string)
                        }
                        "resource.aws.com/devicegroup1_id" => group(&mut map, 0)?,
                        "resource.aws.com/devicegroup4_id" => group(&mut map, 1)?,
                        "resource.aws.com/devicegroup8_id" => group(&mut map, 2)?,
                        "resource.aws.com/devicegroup16_id" => group(&mut map, 3)?,
                        "dra.net/pciDevice" | "pciDevice" => {
                            common.pci_device = boxed(map.next_value::<Attribute>()?.string)
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(KeptAttributes { device_id, common: shared_attributes(common), device_groups })
            }
            fn visit_unit<E>(self) -> Result<KeptAttributes, E> {
                Ok(KeptAttributes::default())
            }
        }
        deserializer.deserialize_any(Kept)
    }
}

impl Default for KeptAttributes {
    fn default() -> Self {
        KeptAttributes {
            device_id: None,
            common: shared_attributes(CommonAttributes::default()),
            device_groups: [None; 4],
        }
    }
}

// Pooled devices are untainted, so equal devices hash alike without their taints (which have no `Hash`).
impl Eq for DeviceView {}

impl Hash for DeviceView {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.attributes.device_id.hash(state);
        self.attributes.common.hash(state);
        self.attributes.device_groups.hash(state);
    }
}

impl DeviceView {
    pub fn device_id(&self) -> Option<i64> {
        self.attributes.device_id.map(i64::from)
    }
    pub fn resource_type(&self) -> Option<&str> {
        self.attributes.common.resource_type.as_deref()
    }
    pub fn dra_driver_version(&self) -> Option<&str> {
        self.attributes.common.dra_driver_version.as_deref()
    }
    pub fn instance_type(&self) -> Option<&str> {
        self.attributes.common.instance_type.as_deref()
    }
    pub fn neuron_driver_version(&self) -> Option<&str> {
        self.attributes.common.neuron_driver_version.as_deref()
    }
    pub fn pci_device(&self) -> Option<&str> {
        self.attributes.common.pci_device.as_deref()
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
    #[serde(deserialize_with = "meta_with_labels")]
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
    #[serde(deserialize_with = "meta_with_labels")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: NodeStatusView,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatusView {
    /// Only whether the legacy device plugin's resources are there is read: only their keys are kept.
    #[serde(default, deserialize_with = "legacy_keys_only")]
    pub allocatable: Vec<String>,
    /// Only the hardware-health conditions health and remediation read are kept (a node's other conditions, with
    /// their messages, would cost more than the rest of its view).
    #[serde(default, deserialize_with = "health_conditions_only")]
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
    /// The same on most nodes of a fleet: held once.
    #[serde(default, deserialize_with = "interned_str")]
    pub kubelet_version: Shared,
}

fn ready_only<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<ConditionView>, D::Error> {
    conditions_of(deserializer, &["Ready"])
}

fn health_conditions_only<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<ConditionView>, D::Error> {
    conditions_of(
        deserializer,
        &[crate::logic::health::NEURON_HEALTH, crate::logic::remediation::ACCELERATED_HARDWARE_READY],
    )
}

fn conditions_of<'de, D: Deserializer<'de>>(deserializer: D, types: &[&str]) -> Result<Vec<ConditionView>, D::Error> {
    let mut conditions = Option::<Vec<ConditionView>>::deserialize(deserializer)?.unwrap_or_default();
    conditions.retain(|c| types.contains(&c.type_.as_str()));
    conditions.shrink_to_fit();
    Ok(conditions)
}

fn legacy_keys_only<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let map: Option<BTreeMap<String, IgnoredAny>> = Option::deserialize(deserializer)?;
    let legacy = |key: &String| crate::logic::health::LEGACY_DEVICE_PLUGIN_RESOURCES.contains(&key.as_str());
    Ok(map.map(|m| m.into_keys().filter(legacy).collect()).unwrap_or_default())
}

/// A kubelet-plugin Pod: labels, the node it runs on (or is pinned to) and whether it is Ready.
#[derive(Resource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[resource(inherit = "Pod")]
pub struct PodView {
    #[serde(deserialize_with = "plugin_pod_meta")]
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
    /// Boxed: most pods are bound and hold none, and an unboxed one would take more room than the rest of the pod.
    #[serde(default)]
    pub affinity: Option<Box<k8s_openapi::api::core::v1::Affinity>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct PodStatusView {
    /// Only `Ready` is read, so only it is kept.
    #[serde(default, deserialize_with = "ready_only")]
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
        crate::logic::nodes::pinned_node(self.spec.affinity.as_ref()?)
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
    use crate::devtools::simulate::fleet::{self, FleetSpec};

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
        assert_eq!(&*view.spec.driver, "neuron.aws.com");
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
        let (a, b) = (&first.spec.devices[0], &second.spec.devices[3]);
        assert!(Arc::ptr_eq(&a.attributes.common, &b.attributes.common), "one copy of the attributes devices share");
        assert_eq!(a.instance_type(), Some("trn2u.48xlarge"));
        let same_name = second.spec.devices.iter().find(|d| d.name == a.name).unwrap();
        assert!(Arc::ptr_eq(&a.name, &same_name.name), "{} is one allocation on every node", a.name);
        assert_ne!(a.device_group(4), None);
        assert_eq!(std::mem::size_of::<DeviceView>(), 64);
    }

    #[test]
    fn nodes_that_publish_the_same_devices_share_them_and_a_tainted_device_is_its_own() {
        // The simulator wires node i's EFAs at PCI layout i % 200: nodes 0 and 200 publish the same devices, node 1
        // others (its group ids differ).
        let mut tainted = fleet::resource_slice(&fleet(), 200, None);
        tainted.spec.devices.as_mut().unwrap()[2].taints =
            Some(vec![DeviceTaint { key: "k".into(), effect: "NoExecute".into(), value: None, time_added: None }]);
        let first = slice_view(&fleet::resource_slice(&fleet(), 0, None));
        let same = slice_view(&tainted);
        let other = slice_view(&fleet::resource_slice(&fleet(), 1, None));
        assert!(Arc::ptr_eq(&first.spec.devices[5], &same.spec.devices[5]), "one copy of a device alike on two nodes");
        assert!(!Arc::ptr_eq(&first.spec.devices[2], &same.spec.devices[2]), "a tainted device is not shared");
        assert_eq!((first.spec.devices[2].taints.len(), same.spec.devices[2].taints.len()), (0, 1));
        assert_ne!(first.spec.devices[5].device_group(4), other.spec.devices[5].device_group(4));
        assert!(!Arc::ptr_eq(&first.spec.devices[5], &other.spec.devices[5]), "devices of another layout are others");
        assert_eq!(first.spec.devices.capacity(), first.spec.devices.len(), "no spare room in the list");
    }

    #[test]
    fn a_pod_view_keeps_its_ready_condition_only() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "generateName": "p-", "labels": {
                "a": "b", "neurondra.io/config": "c", "controller-revision-hash": "h",
            }},
            "spec": {"nodeName": "n", "containers": []},
            "status": {"conditions": [
                {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"},
                {"type": "Initialized", "status": "True"},
            ]},
        }))
        .unwrap();
        let view = pod_view(&pod);
        assert_eq!(view.status.conditions.len(), 1);
        assert!(view.ready());
        let labels: Vec<String> = view.metadata.labels.unwrap().into_keys().collect();
        assert_eq!(labels, ["controller-revision-hash", "neurondra.io/config"], "the labels read");
        assert_eq!(view.metadata.generate_name, None);
    }

    #[test]
    fn a_node_view_keeps_labels_legacy_resources_health_conditions_and_kubelet_version() {
        let mut node = fleet::node(&fleet(), 0);
        let mut status = fleet::node_status(&fleet());
        status["allocatable"]["aws.amazon.com/neuron"] = serde_json::json!("16");
        let problem = serde_json::json!({"type": "NeuronHealth", "status": "True", "reason": "NeuronHardwareError"});
        status["conditions"].as_array_mut().unwrap().push(problem);
        node.status = Some(serde_json::from_value(status).unwrap());
        node.metadata.managed_fields = Some(vec![Default::default()]);
        node.metadata.annotations = Some(BTreeMap::from([("a".to_string(), "b".to_string())]));
        let view = node_view(&node);
        assert_eq!((view.metadata.managed_fields, view.metadata.annotations), (None, None), "skipped while parsing");
        assert_eq!(view.metadata.labels.unwrap()["node.kubernetes.io/instance-type"], "trn2u.48xlarge");
        assert_eq!(view.status.allocatable, ["aws.amazon.com/neuron"], "only the legacy plugin's resources");
        let conditions: Vec<&str> = view.status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(conditions, ["NeuronHealth"], "only the hardware-health conditions");
        assert_eq!(&*view.status.node_info.kubelet_version, "v1.34.2");
    }
}
