//! The write layer: every change the operator makes to the cluster goes through here. `execute` carries out one
//! plan in one `Pass`: the plugin's objects and the templates, remediation's rules, then whatever the plan found
//! the config has and no longer wants. The rollout step's plugin pods go apart, in `evict`, once the step is in the status; the
//! config's own writes (finalizer, status, the end of a pass) are in `config`.

pub mod apply;
pub mod config;
pub mod operands;
pub mod pass;
pub mod publish;

use futures::future::join_all;

use crate::api::labels::MANAGER;
use crate::controller::Context;
use crate::controller::pure::plan::{Driver, NamespaceState, Plan, Step};
use crate::controller::pure::report::Report;
use crate::logic::desired::{Desired, Object, Stage};
use apply::shared_manager;
use pass::Pass;

/// Carries out `plan`: every write of one reconcile, and what each did.
pub async fn execute(plan: &Plan, ctx: &Context) -> Report {
    let mut pass = Pass::new(ctx, &plan.config.name, plan.mode);
    // The driver and the templates (with the budgets) do not depend on each other: written at the same time, the
    // DaemonSet controller sees the plugin while the templates are still being created.
    let mut templates = pass.fork();
    tokio::join!(install_driver(plan, &mut pass), async {
        templates.ensure_templates(&plan.desired.templates, &plan.replaced_templates, &plan.templates_in_place).await;
        ensure_stage(&mut templates, &plan.desired, Stage::Quotas, &plan.config.name).await;
    });
    pass.join(templates);
    // The templates left out for a conflict are not written: the plan wants them, so this config's own copy stays.
    for rule in plan.remediation.rules() {
        pass.ensure(rule, MANAGER).await;
    }
    pass.remove(&plan.unwanted).await;
    pass.report
}

/// Deletes the plugin pods of the plan's rollout step. The reconcile calls it only after the status that records
/// the step is written (write-ahead): a status write that fails (throttled, the API server away, the operator
/// killed in between) leaves the pods alone, so the next pass plans the same step again from the same status
/// instead of moving a second batch while the first is still unrecorded.
pub async fn evict(plan: &Plan, step: &Step, ctx: &Context) -> Report {
    let mut pass = Pass::new(ctx, &plan.config.name, plan.mode);
    pass.evict(&step.evict, &plan.config.spec.driver.namespace).await;
    pass.report
}

/// The plugin's objects, stage by stage (`logic::desired::Stage`): the Namespace first; then, at the same time, the
/// ServiceAccount, the binding of the plugin's rights and the DeviceClasses; the DaemonSet last, and only once the
/// stages before it are written and the plugin's fences are in place (the plan says `Driver::Unfenced` otherwise,
/// and the DaemonSet is kept as it is). Nothing goes into a namespace being deleted; what is there is kept until
/// it can be created anew.
async fn install_driver(plan: &Plan, pass: &mut Pass<'_>) {
    let desired = &plan.desired;
    let mut usable = match plan.driver_namespace {
        NamespaceState::Missing => ensure_stage(pass, desired, Stage::Namespace, &plan.config.name).await,
        NamespaceState::Exists => true,
        NamespaceState::Terminating => false,
    };
    let rebound = pass.delete_rebound(&desired.cluster_role_binding).await;
    let mut forks: Vec<Pass<'_>> = Stage::BEFORE_PLUGIN.iter().map(|_| pass.fork()).collect();
    let written = join_all(forks.iter_mut().zip(Stage::BEFORE_PLUGIN).map(|(fork, stage)| async move {
        // Not written now: the plan wants the stage's objects, so what exists is kept as it is.
        if (stage.in_driver_namespace() && !usable) || (stage == Stage::Rights && rebound) {
            return false;
        }
        ensure_stage(fork, desired, stage, &plan.config.name).await
    }))
    .await;
    for ((fork, stage), written) in forks.into_iter().zip(Stage::BEFORE_PLUGIN).zip(written) {
        usable &= written || !stage.in_driver_namespace();
        pass.join(fork);
    }
    // Keep what runs: a conflict or a missing fence neither updates nor deletes the plugin (deleting would take it
    // off every node at once: the plan wants it, so it is not removed), and creates none.
    if usable && !matches!(plan.driver, Driver::BlockedByConflict | Driver::Unfenced) {
        ensure_stage(pass, desired, Stage::Plugin, &plan.config.name).await;
    }
}

/// Runs `$body` with `$o` bound to the object inside any `Object`.
macro_rules! with_object {
    ($object:expr, $o:ident => $body:expr) => {
        match $object {
            Object::Namespace($o) => $body,
            Object::ServiceAccount($o) => $body,
            Object::ClusterRoleBinding($o) => $body,
            Object::DeviceClass($o) => $body,
            Object::DaemonSet($o) => $body,
            Object::Template($o) => $body,
            Object::Quota($o) => $body,
        }
    };
}

/// Applies the objects of one stage in order; false when a write found its namespace being deleted. DeviceClasses
/// go under the config's own manager, as several configs may share one.
async fn ensure_stage(pass: &mut Pass<'_>, desired: &Desired, stage: Stage, config: &str) -> bool {
    let shared = shared_manager(config);
    let mut written = true;
    for object in desired.stage(stage) {
        let manager = if matches!(object, Object::DeviceClass(_)) { shared.as_str() } else { MANAGER };
        written &= with_object!(object, o => pass.ensure(o, manager).await);
    }
    written
}
