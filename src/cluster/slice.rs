//! ResourceSlices as the operator reads them: per device, its name, taints and the attributes health and capacity
//! read, each distinct device held once per process.

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, LazyLock, Mutex};

use k8s_openapi::api::resource::v1::{DeviceTaint, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::parse::meta_without_labels;
use super::shared::{Shared, interned, interned_str};

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
    /// A Neuron device rather than one of its cores (a slice entry without a type is taken for a device).
    pub fn is_neuron_device(&self) -> bool {
        self.resource_type().is_none_or(|t| t == "neuron_device")
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
