//! One reconcile of one config, as a short script: probes and a snapshot of the caches → plan (pure) → act (one
//! pass) → outcome (pure: the status, the events, the evictions, what comes next) → its writes. Decisions live in
//! `plan` and `outcome`, every write in `act`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::act::config::{self as written, FINALIZER};
use super::act::pass::Pass;
use super::act::publish::publish;
use super::expectations::config_key;
use super::pure::events;
use super::pure::observe::AfterAct;
use super::pure::outcome::{self, Outcome};
use super::pure::plan::{Mode, Plan, Unwanted, Wanted};
use super::pure::report::Report;
use super::pure::snapshot::{Owned, Snapshot, rules_of};
use super::{Context, Error, GuardedConfig, act};
use crate::api::NeuronDRAConfig;
use crate::logic::status;
use crate::runtime::telemetry::{ConfigLabels, seconds};

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
            publish(&ctx, &reference, &events::failures(error.failures())).await;
        }
    }
    result
}

/// Applies the config, behind our finalizer: once it is going, removes what it created, then the finalizer.
async fn with_cleanup(parsed: &NeuronDRAConfig, ctx: &Context) -> Result<Action, Error> {
    let clean_up = |config: Arc<NeuronDRAConfig>| async move {
        let done = cleanup(&config, ctx).await;
        if done.is_ok() {
            ctx.forget(&config);
        }
        done
    };
    written::behind_finalizer(parsed, ctx, |config| async move { apply(&config, ctx).await }, clean_up).await
}

/// A config the API server stored but this build cannot parse: reported, never retried in a loop.
async fn report_unparseable(name: &str, invalid: &InvalidObject, ctx: &Context) -> Result<Action, Error> {
    if ctx.already_reported(name, &invalid.error) {
        // Our own status write brings it back here; report once per distinct error.
        return Ok(Action::await_change());
    }
    tracing::warn!(config = name, error = %invalid.error, "cannot parse config");
    // The typed status cannot be read either: the rollout's record is read from the raw object.
    let kept = written::stored_rollout(name, ctx).await;
    let outcome = outcome::unparseable(invalid, kept.as_ref(), status::now());
    written::patch_status(name, &outcome.status, ctx).await?;
    ctx.reported_unparseable(name, &invalid.error);
    publish(ctx, &ObjectRef::<NeuronDRAConfig>::new(name).into(), &outcome.events).await;
    Ok(Action::await_change())
}

fn going_with_our_finalizer(metadata: &ObjectMeta) -> bool {
    metadata.deletion_timestamp.is_some() && metadata.finalizers.iter().flatten().any(|f| f == FINALIZER)
}

/// A config this build cannot parse that is being deleted: what it owns goes (found by its label and uid; the spec
/// is not needed), then our finalizer, so an unreadable config never hangs in deletion.
async fn cleanup_unparseable(name: &str, metadata: &ObjectMeta, ctx: &Context) -> Result<Action, Error> {
    cleanup_owned(name, metadata.uid.clone(), ctx).await?;
    written::remove_finalizer(name, metadata, ctx).await?;
    ctx.forget_named(name, metadata.uid.as_deref(), None);
    Ok(Action::await_change())
}

/// One pass over a config: probe, plan, act, decide the outcome, write it.
async fn apply(config: &NeuronDRAConfig, ctx: &Context) -> Result<Action, Error> {
    let validated = ctx.stores.validations.of(config);
    let probes = ctx.capabilities.probe(&ctx.client, ctx.taint_rules.as_ref(), validated.as_deref());
    let probes = probes.await.map_err(Error::Probe)?;
    let snapshot = Snapshot::new(&ctx.stores, ctx.taint_rules.clone(), probes);
    let plan = match Plan::new(config, &snapshot, status::now().as_second()) {
        Ok(plan) => plan,
        Err(refusal) => return report_refused(config, &outcome::refused(config, &refusal, status::now()), ctx).await,
    };
    let report = act::execute(&plan, ctx).await;
    let name = &plan.config.name;
    let previous = ctx.remembered(name);
    let after = AfterAct::read(&plan, &ctx.stores);
    let outcome = outcome::outcome(config, &plan, &report, &snapshot, &after, &previous, status::now());
    ctx.remember(name, outcome.remembered.clone());
    if let Some(gauges) = &outcome.gauges {
        written::record_gauges(ctx, gauges.config, &outcome.status, &gauges.capacity, gauges.managed_objects);
    }
    written::write_status_and_events(config, &outcome.status, &outcome.events, ctx).await?;
    // Only now, with the step in the stored status, are its plugin pods deleted (see `act::evict`).
    let evicted = match outcome.evictions {
        Some(step) => act::evict(&plan, step, ctx).await,
        None => Report::default(),
    };
    written::failed(report.errors.into_iter().chain(evicted.errors).collect())?;
    Ok(outcome.next.action(evicted.pending))
}

/// A config refused before anything is applied: its event, then its status; permanent until the spec changes.
async fn report_refused(config: &NeuronDRAConfig, outcome: &Outcome<'_>, ctx: &Context) -> Result<Action, Error> {
    publish(ctx, &config.object_ref(&()), &outcome.events).await;
    written::write_status(config, &outcome.status, ctx).await?;
    Ok(Action::await_change())
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
    // A cleanup wants nothing: everything the config owns goes.
    let owned = Owned::read(&ctx.stores);
    let unwanted = Unwanted::of(&owned, name, uid.as_deref(), &Wanted::new());
    let rules = rules_of(&owned.taint_rules, name);
    let mut pass = Pass::new(ctx, name, Mode::Cleanup);
    pass.remove(&unwanted).await;
    // With the uid, as `object_ref` gives it: `kubectl describe` finds a config's events by it.
    let reference =
        k8s_openapi::api::core::v1::ObjectReference { uid, ..ObjectRef::<NeuronDRAConfig>::new(name).into() };
    publish(ctx, &reference, &events::of_cleanup(&pass.report, &rules)).await;
    written::failed(pass.report.errors)?;
    Ok(Action::await_change())
}
