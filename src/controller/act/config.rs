//! The writes to the config itself: our finalizer and its status (with the pass's events beside it and its gauges).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use kube::{Resource, ResourceExt};
use serde_json::json;

use kube::runtime::events::Event;

use super::publish::publish;
use crate::api::labels::MANAGER;
use crate::api::{DriverStatus, NeuronDRAConfig, NeuronDRAConfigStatus, TemplateCapacity};
use crate::controller::expectations::config_key;
use crate::controller::pure::failure::ApplyError;
use crate::controller::{Context, Error};
use crate::logic::validate::ValidatedConfig;
use crate::runtime::telemetry::ConfigLabels;

pub const FINALIZER: &str = "neurondra.io/cleanup";

/// Writes the status (when it changed) while the events go out: they are not what a user waits for.
pub async fn write_status_and_events(
    config: &NeuronDRAConfig,
    status: &NeuronDRAConfigStatus,
    events: &[Event],
    ctx: &Context,
) -> Result<(), Error> {
    let reference = config.object_ref(&());
    let (written, ()) = tokio::join!(write_status(config, status, ctx), publish(ctx, &reference, events));
    written
}

/// The per-config gauges: those of the status this pass writes, the room per template, the objects managed.
pub fn record_gauges(
    ctx: &Context,
    config: &ValidatedConfig,
    status: &NeuronDRAConfigStatus,
    capacity: &[TemplateCapacity],
    managed_objects: usize,
) {
    ctx.metrics.record_capacity(&config.name, config, capacity);
    ctx.metrics.record_status(&config.name, status);
    let labels = ConfigLabels { config: config.name.clone() };
    ctx.metrics.managed_objects.get_or_create(&labels).set(managed_objects as i64);
}

/// The pass's failed writes, all of them, as the reconcile's error.
pub fn failed(errors: Vec<ApplyError>) -> Result<(), Error> {
    if errors.is_empty() { Ok(()) } else { Err(Error::Writes(errors)) }
}

/// Runs `apply` on the config behind our finalizer (added first when missing) or, once it is going, `cleanup`, then
/// removes the finalizer (kube's finalizer helper, whose one write is that removal).
pub async fn behind_finalizer<A, C>(
    parsed: &NeuronDRAConfig,
    ctx: &Context,
    apply: impl FnOnce(Arc<NeuronDRAConfig>) -> A,
    cleanup: impl FnOnce(Arc<NeuronDRAConfig>) -> C,
) -> Result<Action, Error>
where
    A: Future<Output = Result<Action, Error>>,
    C: Future<Output = Result<Action, Error>>,
{
    let api: Api<NeuronDRAConfig> = Api::all(ctx.client.clone());
    let config = with_finalizer(parsed, ctx).await?;
    finalizer(&api, FINALIZER, config, |event| async {
        match event {
            FinalizerEvent::Apply(config) => apply(config).await,
            FinalizerEvent::Cleanup(config) => cleanup(config).await,
        }
    })
    .await
    .or_else(|error| match error {
        // Already gone: a pass before this one removed the finalizer and the server deleted the config.
        FinalizerError::RemoveFinalizer(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        error => Err(Error::Finalizer(Box::new(error))),
    })
}

/// The config with our finalizer, added first when it is missing and the config is not going. The pass then goes
/// on to apply (the finalizer helper alone would stop and wait for the event of its own write).
async fn with_finalizer(config: &NeuronDRAConfig, ctx: &Context) -> Result<Arc<NeuronDRAConfig>, Error> {
    let mut config = config.clone();
    if config.meta().deletion_timestamp.is_some() || config.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Arc::new(config));
    }
    // The test makes the write fail, rather than drop another's finalizer, when the list changed meanwhile.
    let operations = match config.finalizers() {
        [] => json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]),
        current => json!([{"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}]),
    };
    let patch = Patch::<()>::Json(serde_json::from_value(operations).expect("a well-formed JSON patch"));
    let api: Api<NeuronDRAConfig> = Api::all(ctx.client.clone());
    let stored = api
        .patch(&config.name_any(), &PatchParams::default(), &patch)
        .await
        .map_err(|e| Error::Finalizer(Box::new(FinalizerError::AddFinalizer(e))))?;
    expect_in_cache(ctx, &config);
    config.finalizers_mut().push(FINALIZER.into());
    // The status this pass writes replaces the stored version, not the one read.
    config.metadata.resource_version = stored.metadata.resource_version;
    Ok(Arc::new(config))
}

/// Removes our finalizer from a config this build cannot parse, as a plain object (the typed client cannot read
/// the answer). The test makes the write fail, rather than drop another's finalizer, when the list changed
/// meanwhile; a config already gone is no failure.
pub async fn remove_finalizer(name: &str, metadata: &ObjectMeta, ctx: &Context) -> Result<(), Error> {
    let current = metadata.finalizers.clone().unwrap_or_default();
    let kept: Vec<&String> = current.iter().filter(|f| *f != FINALIZER).collect();
    let operations = json!([{"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept}]);
    let patch = Patch::<()>::Json(serde_json::from_value(operations).expect("a well-formed JSON patch"));
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ApiResource::erase::<NeuronDRAConfig>(&()));
    match api.patch(name, &PatchParams::default(), &patch).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(Error::Finalizer(Box::new(FinalizerError::RemoveFinalizer(error)))),
    }
}

/// `status.driver.rollout` of a config the typed client cannot parse, read as a plain object (None when it has
/// none, or when the read fails: the report goes on without it).
pub async fn stored_rollout(name: &str, ctx: &Context) -> Option<NeuronDRAConfigStatus> {
    let resource = ApiResource::erase::<NeuronDRAConfig>(&());
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
    let object = api
        .get(name)
        .await
        .inspect_err(|error| tracing::warn!(config = name, %error, "cannot read the stored rollout"))
        .ok()?;
    let rollout = object.data.pointer("/status/driver/rollout")?.clone();
    let rollout = serde_json::from_value(rollout).ok()?;
    Some(NeuronDRAConfigStatus {
        driver: Some(DriverStatus { rollout: Some(rollout), ..DriverStatus::default() }),
        ..NeuronDRAConfigStatus::default()
    })
}

/// One server-side apply of the whole status, only when it differs from what is stored.
pub async fn write_status(
    config: &NeuronDRAConfig,
    status: &NeuronDRAConfigStatus,
    ctx: &Context,
) -> Result<(), Error> {
    if config.status.as_ref() == Some(status) {
        return Ok(());
    }
    patch_status(&config.name_any(), status, ctx).await?;
    expect_in_cache(ctx, config);
    Ok(())
}

/// Remembers that the config just changed from the version this pass read, until the cache shows it.
fn expect_in_cache(ctx: &Context, config: &NeuronDRAConfig) {
    ctx.applier.expectations.wrote(config_key(&config.name_any()), config.resource_version());
}

/// One server-side apply of the whole status, whatever is stored.
pub async fn patch_status(name: &str, status: &NeuronDRAConfigStatus, ctx: &Context) -> Result<(), Error> {
    let patch = json!({"apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "status": status});
    let api: Api<NeuronDRAConfig> = Api::all(ctx.client.clone());
    api.patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch)).await.map_err(Error::Status)?;
    Ok(())
}
