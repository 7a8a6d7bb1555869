//! operands: the kinds the operator writes, each with its cache and its API, so that one `Pass` (`pass.rs`) can
//! apply and delete objects of any of them: the owned kinds of the table (`controller/kinds.rs`), the driver
//! namespace and remediation's DeviceTaintRules.

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::core::ApiResource;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::apply::Ownership;
use crate::cluster::taint_rule::TaintRuleView;
use crate::controller::{Context, Stores};

/// A kind the operator writes: which version the server serves, what its cache holds and which API writes it.
pub trait Operand: Resource + Clone + Serialize + DeserializeOwned + Debug + Send + Sync + 'static {
    /// What its cache tells about who made an object (the owned kinds' caches hold only what is labelled).
    const OWNERSHIP: Ownership = Ownership::Labelled;
    /// The kind as the server serves it; None where it serves none (nothing of it is written).
    fn served(ctx: &Context) -> Option<Self::DynamicType>;
    /// The cached copy of one object.
    fn cached(stores: &Stores, name: &str, namespace: Option<&str>) -> Option<Arc<Self>>;
    /// Every cached object of the kind that the operator may delete.
    fn deletable(stores: &Stores) -> Vec<Arc<Self>>;
    fn api(client: &kube::Client, dt: &Self::DynamicType, namespace: Option<&str>) -> Api<Self>;
}

macro_rules! operands {
    ($($ty:ty => $store:ident: $scope:ident, $trigger:ident, $release:ident, $driver:literal;)*) => {
        $(operands!(@one $ty, $store, $scope);)*
    };
    (@one $ty:ty, $store:ident, namespaced) => {
        impl Operand for $ty {
            fn served(_: &Context) -> Option<()> { Some(()) }
            fn cached(stores: &Stores, name: &str, namespace: Option<&str>) -> Option<Arc<Self>> {
                stores.owned.$store.get(&ObjectRef::new(name).within(namespace.unwrap_or_default()))
            }
            fn deletable(stores: &Stores) -> Vec<Arc<Self>> { stores.owned.$store.state() }
            fn api(client: &kube::Client, _: &(), namespace: Option<&str>) -> Api<Self> {
                Api::namespaced(client.clone(), namespace.unwrap_or_default())
            }
        }
    };
    (@one $ty:ty, $store:ident, cluster) => {
        impl Operand for $ty {
            fn served(_: &Context) -> Option<()> { Some(()) }
            fn cached(stores: &Stores, name: &str, _: Option<&str>) -> Option<Arc<Self>> {
                stores.owned.$store.get(&ObjectRef::new(name))
            }
            fn deletable(stores: &Stores) -> Vec<Arc<Self>> { stores.owned.$store.state() }
            fn api(client: &kube::Client, _: &(), _: Option<&str>) -> Api<Self> { Api::all(client.clone()) }
        }
    };
}
owned_kinds!(operands);

/// The driver's namespace: created when missing, never deleted (it may hold more than the plugin). Namespaces are
/// cached as metadata, all a Namespace the operator writes has.
impl Operand for Namespace {
    const OWNERSHIP: Ownership = Ownership::Adopted;
    fn served(_: &Context) -> Option<()> {
        Some(())
    }
    fn cached(stores: &Stores, name: &str, _: Option<&str>) -> Option<Arc<Self>> {
        let meta = stores.namespaces.get(&ObjectRef::new(name))?;
        Some(Arc::new(Namespace { metadata: meta.metadata.clone(), ..Namespace::default() }))
    }
    fn deletable(_: &Stores) -> Vec<Arc<Self>> {
        Vec::new()
    }
    fn api(client: &kube::Client, _: &(), _: Option<&str>) -> Api<Self> {
        Api::all(client.clone())
    }
}

/// Remediation's DeviceTaintRules, in the version the server serves (found at start).
impl Operand for TaintRuleView {
    const OWNERSHIP: Ownership = Ownership::Everything;
    fn served(ctx: &Context) -> Option<ApiResource> {
        ctx.taint_rules.clone()
    }
    fn cached(stores: &Stores, name: &str, _: Option<&str>) -> Option<Arc<Self>> {
        stores.taint_rules.state().into_iter().find(|rule| rule.name_any() == name)
    }
    fn deletable(stores: &Stores) -> Vec<Arc<Self>> {
        stores.taint_rules.state()
    }
    fn api(client: &kube::Client, dt: &ApiResource, _: Option<&str>) -> Api<Self> {
        Api::all_with(client.clone(), dt)
    }
}
