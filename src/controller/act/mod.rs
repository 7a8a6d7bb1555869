//! The write layer: every change the operator makes to the cluster goes through here. `execute` carries out one
//! plan in one `Pass`: the plugin's objects and the templates, remediation's rules, then whatever the config has
//! and no longer wants. The rollout step's plugin pods go apart, in `evict`, once the step is in the status.

pub mod apply;
pub mod operands;
pub mod pass;
pub mod publish;
pub mod report;

use crate::api::labels::MANAGER;
use crate::controller::Context;
use crate::controller::plan::{Driver, NamespaceState, Plan, Step};
use apply::shared_manager;
use pass::Pass;
use report::Report;

/// Carries out `plan`: every write of one reconcile, and what each did.
pub async fn execute(plan: &Plan, ctx: &Context) -> Report {
    let mut pass = Pass::new(ctx, &plan.config.name, plan.config.uid.clone(), plan.mode);
    // The driver and the templates do not depend on each other: written at the same time, the DaemonSet
    // controller sees the plugin while the templates are still being created.
    let mut templates = pass.fork();
    tokio::join!(install_driver(plan, &mut pass), templates.ensure_templates(&plan.desired.templates));
    pass.join(templates);
    // Left out for a conflict: this config's own copy stays as it is.
    for template in &plan.kept_templates {
        pass.claim(template);
    }
    for rule in plan.remediation.rules() {
        pass.ensure(rule, MANAGER).await;
    }
    pass.delete_unclaimed().await;
    pass.report
}

/// Deletes the plugin pods of the plan's rollout step. The reconcile calls it only after the status that records
/// the step is written (write-ahead): a status write that fails (throttled, the API server away, the operator
/// killed in between) leaves the pods alone, so the next pass plans the same step again from the same status
/// instead of moving a second batch while the first is still unrecorded.
pub async fn evict(plan: &Plan, step: &Step, ctx: &Context) -> Report {
    let mut pass = Pass::new(ctx, &plan.config.name, plan.config.uid.clone(), plan.mode);
    pass.evict(&step.evict, &plan.config.spec.driver.namespace).await;
    pass.report
}

/// The plugin's state as the pass left it: the plan's, unless a write found the driver namespace being deleted
/// before the cache showed it.
pub fn driver(plan: &Plan, report: &Report) -> Driver {
    match plan.driver {
        Driver::Apply if report.namespace_terminating => Driver::WaitingForNamespace,
        driver => driver,
    }
}

/// The plan's rollout step, if the plugin is still applied after the pass (its events, evictions and recheck
/// follow it; a plugin not applied after all moves no step).
pub fn step(plan: &Plan, driver: Driver) -> Option<&Step> {
    (driver == Driver::Apply).then_some(&plan.rollout)
}

/// The plugin's objects: the Namespace first; then, at the same time, its ServiceAccount, its RBAC, the fence
/// (admission policy and binding) and the DeviceClass; the DaemonSet last, and only once its rights and its fence
/// are in place, so the plugin never runs unfenced or without its rights (a failed fence write keeps the DaemonSet
/// as it is). Nothing goes into a namespace being deleted; what is there is kept until it can be created anew.
async fn install_driver(plan: &Plan, pass: &mut Pass<'_>) {
    let desired = &plan.desired;
    let usable = match plan.driver_namespace {
        NamespaceState::Missing => pass.ensure(&desired.namespace, MANAGER).await,
        NamespaceState::Exists => true,
        NamespaceState::Terminating => false,
    };
    let (mut rbac, mut fence, mut class) = (pass.fork(), pass.fork(), pass.fork());
    let class_manager = shared_manager(&plan.config.name);
    let (usable, (), (), ()) = tokio::join!(
        async {
            if usable {
                pass.ensure(&desired.service_account, MANAGER).await
            } else {
                pass.claim(&desired.service_account);
                false
            }
        },
        async {
            rbac.ensure(&desired.cluster_role, MANAGER).await;
            rbac.ensure(&desired.cluster_role_binding, MANAGER).await;
        },
        async {
            fence.ensure(&desired.admission_policy, MANAGER).await;
            fence.ensure(&desired.admission_policy_binding, MANAGER).await;
        },
        async {
            class.ensure(&desired.device_class, &class_manager).await;
            if let Some(extended) = &desired.extended_resource_class {
                class.ensure(extended, &class_manager).await;
            }
        },
    );
    let fenced = fence.report.errors.is_empty();
    for fork in [rbac, fence, class] {
        pass.join(fork);
    }
    match plan.driver {
        // Keep what runs: a conflict neither updates nor deletes the plugin (that would take it off every node at
        // once), and creates none.
        Driver::BlockedByConflict => pass.claim(&desired.daemon_set),
        _ if usable && fenced => {
            pass.ensure(&desired.daemon_set, MANAGER).await;
        }
        _ => pass.claim(&desired.daemon_set),
    }
}
