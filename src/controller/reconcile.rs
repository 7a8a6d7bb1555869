//! One reconcile of one config, as a short script: snapshot of the caches → plan (pure) → act (one pass) → the
//! observation, the status and the events, derived from the plan and what the act did. Decisions live in `plan`,
//! writes in `act`, the status in `observe` and `logic::status`, what users are told in `events`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::act::apply::config_key;
use super::act::pass::Pass;
use super::act::report::Report;
use super::events::EventReason;
use super::plan::{Driver, Mode, Plan};
use super::snapshot::Snapshot;
use super::{Context, Error, GuardedConfig, act, events, observe};
use crate::api::labels::MANAGER;
use crate::api::{DriverStatus, NeuronDRAConfig, NeuronDRAConfigStatus};
use crate::logic::status::{self, ConditionType, Observation, Reason, Validity, condition_reason};
use crate::runtime::telemetry::{ConfigLabels, seconds};

pub const FINALIZER: &str = "neurondra.io/cleanup";

/// One pass over one config. Its span names the config, so every line it logs does.
#[tracing::instrument(name = "reconcile", skip_all, fields(config = %config.name_any()))]
pub async fn reconcile(config: Arc<GuardedConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.synced().await;
    let started = Instant::now();
    let name = config.name_any();
    if let Ok(parsed) = &config.0
        && parsed.meta().deletion_timestamp.is_some()
        && !parsed.finalizers().iter().any(|f| f == FINALIZER)
    {
        // Going, and nothing of ours is left to clean up.
        ctx.forget(parsed);
        return Ok(Action::await_change());
    }
    if let Ok(parsed) = &config.0
        && !ctx.applier.expectations.settled(&config_key(&name), parsed.resource_version().as_deref())
    {
        // Our last write to this config (its finalizer or status) is not in the cache yet: a pass over the older
        // copy would repeat what the last one did (a rollout step, say). The write's own event brings it back.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    ctx.metrics.reconciles.get_or_create(&ConfigLabels { config: name.clone() }).inc();

    if config.0.is_ok() {
        ctx.parsed_again(&name);
    }
    let result = match &config.0 {
        Err(invalid) if going_with_our_finalizer(&invalid.metadata) => {
            cleanup_unparseable(&name, &invalid.metadata, &ctx).await
        }
        Err(invalid) => report_unparseable(&name, invalid, &ctx).await,
        Ok(parsed) if parsed.spec.paused && parsed.meta().deletion_timestamp.is_none() => {
            // Paused: no writes but the status, not even the finalizer.
            apply(parsed, &ctx).await
        }
        Ok(parsed) => with_cleanup(parsed, &ctx).await,
    };

    ctx.metrics.reconcile_duration.observe(seconds(started.elapsed()));
    match &result {
        Ok(_) => ctx.reset_failures(&name),
        Err(error) => {
            let reference = ObjectRef::<NeuronDRAConfig>::new(&name).into();
            events::publish(&ctx, &reference, &events::failures(error.failures())).await;
        }
    }
    result
}

/// Applies the config, behind our finalizer: once it is going, removes what it created, then the finalizer.
async fn with_cleanup(parsed: &NeuronDRAConfig, ctx: &Context) -> Result<Action, Error> {
    let api: Api<NeuronDRAConfig> = Api::all(ctx.client.clone());
    let config = with_finalizer(&api, parsed, ctx).await?;
    finalizer(&api, FINALIZER, config, |event| async {
        match event {
            FinalizerEvent::Apply(config) => apply(&config, ctx).await,
            FinalizerEvent::Cleanup(config) => {
                let done = cleanup(&config, ctx).await;
                if done.is_ok() {
                    ctx.forget(&config);
                }
                done
            }
        }
    })
    .await
    .or_else(|error| match error {
        // Already gone: a pass before this one removed the finalizer and the server deleted the config.
        FinalizerError::RemoveFinalizer(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        error => Err(Error::Finalizer(Box::new(error))),
    })
}

/// The config with our finalizer, added first when it is missing and the config is not going. This pass then goes
/// on to apply (the finalizer helper alone would stop and wait for the event of its own write).
async fn with_finalizer(
    api: &Api<NeuronDRAConfig>,
    config: &NeuronDRAConfig,
    ctx: &Context,
) -> Result<Arc<NeuronDRAConfig>, Error> {
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

/// A config the API server stored but this build cannot parse: reported, never retried in a loop.
async fn report_unparseable(name: &str, invalid: &InvalidObject, ctx: &Context) -> Result<Action, Error> {
    if ctx.already_reported(name, &invalid.error) {
        // Our own status write brings it back here; report once per distinct error.
        return Ok(Action::await_change());
    }
    tracing::warn!(config = name, error = %invalid.error, "cannot parse config");
    // The typed status cannot be read either: the whole status is written anew, but for the rollout's record, read
    // from the raw object, which must outlive the broken spec (a halt holds until a new template).
    let kept = stored_rollout(name, ctx).await;
    let validity = Validity::Unparseable(invalid.error.clone());
    let observation = observe::not_acted_on(invalid.metadata.generation, false, validity);
    patch_status(name, &status::compute(kept.as_ref(), &observation, status::now()), ctx).await?;
    ctx.reported_unparseable(name, &invalid.error);
    let reference = ObjectRef::<NeuronDRAConfig>::new(name).into();
    let reason = EventReason::Condition(Reason::Unparseable);
    let refused = events::event(EventType::Warning, reason, "Validate", invalid.error.clone());
    events::publish(ctx, &reference, &[refused]).await;
    Ok(Action::await_change())
}

fn going_with_our_finalizer(metadata: &ObjectMeta) -> bool {
    metadata.deletion_timestamp.is_some() && metadata.finalizers.iter().flatten().any(|f| f == FINALIZER)
}

/// A config this build cannot parse that is being deleted: what it owns goes (found by its label and uid; the spec
/// is not needed), then our finalizer, so an unreadable config never hangs in deletion.
async fn cleanup_unparseable(name: &str, metadata: &ObjectMeta, ctx: &Context) -> Result<Action, Error> {
    cleanup_owned(name, metadata.uid.clone(), ctx).await?;
    // As a plain object: the typed client cannot read the answer. The test makes the write fail, rather than drop
    // another's finalizer, when the list changed meanwhile.
    let current = metadata.finalizers.clone().unwrap_or_default();
    let kept: Vec<&String> = current.iter().filter(|f| *f != FINALIZER).collect();
    let operations = json!([{"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept}]);
    let patch = Patch::<()>::Json(serde_json::from_value(operations).expect("a well-formed JSON patch"));
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ApiResource::erase::<NeuronDRAConfig>(&()));
    match api.patch(name, &PatchParams::default(), &patch).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(Error::Finalizer(Box::new(FinalizerError::RemoveFinalizer(error)))),
    }
    ctx.forget_named(name, metadata.uid.as_deref(), None);
    Ok(Action::await_change())
}

/// `status.driver.rollout` of a config the typed client cannot parse, read as a plain object (None when it has
/// none, or when the read fails: the report goes on without it).
async fn stored_rollout(name: &str, ctx: &Context) -> Option<NeuronDRAConfigStatus> {
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

/// A spec that fails validation, or that this server cannot serve: the status and one event (when the reason is
/// new), nothing applied; permanent until the spec changes, so no requeue.
async fn report_refused(
    config: &NeuronDRAConfig,
    refusal: fn(String) -> Validity,
    message: String,
    ctx: &Context,
) -> Result<Action, Error> {
    let validity = refusal(message.clone());
    let reason = validity.reason();
    if condition_reason(config.status.as_ref(), ConditionType::ConfigValid) != Some(reason) {
        let reference = config.object_ref(&());
        let refused = events::event(EventType::Warning, EventReason::Condition(reason), "Validate", message.clone());
        events::publish(ctx, &reference, &[refused]).await;
    }
    write_status(config, &observe::not_acted_on(config.meta().generation, config.spec.paused, validity), ctx).await?;
    Ok(Action::await_change())
}

async fn apply(config: &NeuronDRAConfig, ctx: &Context) -> Result<Action, Error> {
    let fence = ctx.capabilities.fence(&ctx.client).await.map_err(Error::Probe)?;
    let snapshot = Snapshot::new(&ctx.stores, ctx.taint_rules.clone()).with_fence(fence);
    let plan = match Plan::new(config, &snapshot, status::now().as_second()) {
        Ok(plan) => plan,
        Err(invalid) => {
            let message = invalid.0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
            return report_refused(config, Validity::InvalidSpec, message, ctx).await;
        }
    };
    let capabilities = ctx.capabilities.missing(&ctx.client, ctx.taint_rules.as_ref(), &config.spec);
    if let Some(missing) = capabilities.await.map_err(Error::Probe)? {
        return report_refused(config, Validity::Unsupported, missing, ctx).await;
    }

    let report = act::execute(&plan, ctx).await;

    let driver = act::driver(&plan, &report);
    let previous = config.status.as_ref();
    let mut observation = observe::observation(config.meta().generation, &plan, driver, &report, &ctx.stores);
    observation.classes_missing = classes_missing(&plan, ctx).await?;
    let assessment = snapshot.health(&plan.config, plan.driver != Driver::BlockedByConflict);
    let rules = &plan.taint_rules;
    let step = act::step(&plan, driver);
    let classes_missing = &observation.classes_missing;
    let pass =
        events::Pass { plan: &plan, report: &report, step, previous, assessment: &assessment, rules, classes_missing };
    let events = events::of_pass(ctx, &pass);
    observation.capacity = snapshot.capacity(&plan.config);
    (observation.teams, observation.team_summary) = observe::teams(&plan, &ctx.stores, &observation.capacity);
    observation.health = Some(assessment.health);
    record_gauges(ctx, &plan, config, &observation, &report);
    // The events go out while the status is written: they are not what a user waits for.
    let reference = config.object_ref(&());
    let (written, ()) =
        tokio::join!(write_status(config, &observation, ctx), events::publish(ctx, &reference, &events));
    written?;
    // Only now, with the step in the stored status, are its plugin pods deleted (see `act::evict`).
    let evicted = match step {
        Some(step) if !step.evict.is_empty() => act::evict(&plan, step, ctx).await,
        _ => Report::default(),
    };

    failed(report.errors.into_iter().chain(evicted.errors).collect())?;
    if report.pending || evicted.pending || driver == Driver::WaitingForNamespace {
        // Our own writes (or a namespace's deletion) will show up in the cache in a moment; check then.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if !report.foreign.is_empty() {
        // Another tool's objects are not watched (they lack the operator's label): look again for them.
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    // A rollout step's timeout or soak, and remediation's problemFor or clearFor, pass without any event; nor does
    // the EFA driver's DeviceClass, which is not watched, show up with one.
    let efa = (!observation.classes_missing.is_empty()).then_some(super::capabilities::EFA_CLASS_TTL);
    // Nor does a fence restored (admission objects are read by name, not watched).
    let fence = (driver == Driver::Unfenced).then_some(super::capabilities::FENCE_RECHECK);
    let recheck = [step.and_then(|s| s.recheck), plan.remediation.recheck(), efa, fence].into_iter().flatten().min();
    Ok(recheck.map_or_else(Action::await_change, Action::requeue))
}

/// One line per template that claims from a DeviceClass this cluster lacks: the EFA driver's, for `efa: true`.
/// Its pods would stay Pending with nothing but the scheduler's event to say why.
async fn classes_missing(plan: &Plan, ctx: &Context) -> Result<Vec<String>, Error> {
    let templates = crate::logic::build::efa_templates(&plan.config);
    if templates.is_empty() || ctx.capabilities.efa_class(&ctx.client).await.map_err(Error::Probe)? {
        return Ok(Vec::new());
    }
    Ok(vec![format!(
        "templates {} claim EFA interfaces from DeviceClass {}, which does not exist: install AWS's EFA DRA driver \
         (the aws-dranet chart), or their pods stay Pending",
        templates.join(", "),
        crate::logic::build::EFA_DEVICE_CLASS
    )])
}

/// The per-config gauges (from the status this reconcile writes), managed objects and room per template.
fn record_gauges(ctx: &Context, plan: &Plan, object: &NeuronDRAConfig, observation: &Observation, report: &Report) {
    let config = &plan.config;
    let metrics = &ctx.metrics;
    metrics.record_capacity(&config.name, config, &observation.capacity);
    metrics.record_status(&config.name, &status::compute(object.status.as_ref(), observation, status::now()));
    let labels = ConfigLabels { config: config.name.clone() };
    // The templates in place and the config's own driver objects.
    let managed = report.templates_in_place.len() + super::kinds::DRIVER_OBJECTS;
    metrics.managed_objects.get_or_create(&labels).set(managed as i64);
}

/// One server-side apply of the whole status, only when it differs from what is stored.
async fn write_status(config: &NeuronDRAConfig, observation: &Observation, ctx: &Context) -> Result<(), Error> {
    let status = status::compute(config.status.as_ref(), observation, status::now());
    if config.status.as_ref() == Some(&status) {
        return Ok(());
    }
    patch_status(&config.name_any(), &status, ctx).await?;
    expect_in_cache(ctx, config);
    Ok(())
}

/// Remembers that the config just changed from the version this pass read, until the cache shows it.
fn expect_in_cache(ctx: &Context, config: &NeuronDRAConfig) {
    ctx.applier.expectations.wrote(config_key(&config.name_any()), config.resource_version());
}

async fn patch_status(name: &str, status: &NeuronDRAConfigStatus, ctx: &Context) -> Result<(), Error> {
    let patch = json!({"apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "status": status});
    let api: Api<NeuronDRAConfig> = Api::all(ctx.client.clone());
    api.patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&patch)).await.map_err(Error::Status)?;
    Ok(())
}

/// The pass's failed writes, all of them, as the reconcile's error.
fn failed(errors: Vec<crate::controller::act::apply::ApplyError>) -> Result<(), Error> {
    if errors.is_empty() { Ok(()) } else { Err(Error::Writes(errors)) }
}

/// Removes everything this config created before it goes away: a pass that claims nothing. The shared DeviceClass
/// goes with its last owner. The driver namespace stays: another config may want it at any moment, and deleting it
/// would race with that config's rollout.
async fn cleanup(config: &NeuronDRAConfig, ctx: &Context) -> Result<Action, Error> {
    cleanup_owned(&config.name_any(), config.uid(), ctx).await
}

/// Deletes everything the config `name` (with `uid`) owns, found by its label and uid (no spec needed), and says
/// what went.
async fn cleanup_owned(name: &str, uid: Option<String>, ctx: &Context) -> Result<Action, Error> {
    let rules = super::snapshot::rules_of(&ctx.stores.taint_rules.state(), name);
    let mut pass = Pass::new(ctx, name, uid.clone(), Mode::Cleanup);
    pass.delete_unclaimed().await;
    // With the uid, as `object_ref` gives it: `kubectl describe` finds a config's events by it.
    let reference =
        k8s_openapi::api::core::v1::ObjectReference { uid, ..ObjectRef::<NeuronDRAConfig>::new(name).into() };
    events::publish(ctx, &reference, &events::of_cleanup(&pass.report, &rules)).await;
    failed(pass.report.errors)?;
    Ok(Action::await_change())
}
