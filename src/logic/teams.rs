//! teams (pure): what a claim is charged against a device budget, and each team namespace's room. A budget is two
//! quota keys: devices of the config's DeviceClass, and UltraServer node entries of `ultraserver-nodes.<class>`,
//! each node entry standing for `ULTRA_SERVER_NODE_DEVICES` devices; the status adds them up in devices.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::ResourceExt;

use crate::api::{TeamNodeEntries, TeamRoom, TeamStatus, TeamSummary, TemplateCapacity, TemplateRequest};
use crate::logic::catalog::ULTRA_SERVER_NODE_DEVICES;
use crate::logic::desired::{device_quota_key, ultra_server_node_class_name};
use crate::logic::health::MAX_LISTED;

/// What Kubernetes charges for an `All` request: the most devices one claim's allocation can hold
/// (`resource.k8s.io/v1` `AllocationResultsMaxSize`).
pub const ALL_DEVICES_CHARGE: i64 = 32;

/// Devices one claim of `template` is charged against `class`'s quota key, counted as the API server's quota
/// evaluator counts them: each request for the class adds its count (`All` adds 32); a request with alternatives
/// adds its largest alternative for the class.
pub fn charge(template: &ResourceClaimTemplate, class: &str) -> i64 {
    let count = |mode: Option<&str>, count: Option<i64>| match mode {
        Some("All") => ALL_DEVICES_CHARGE,
        _ => count.unwrap_or(1),
    };
    let requests = template.spec.spec.devices.iter().flat_map(|d| d.requests.iter().flatten());
    requests
        .map(|request| {
            let exact = request
                .exactly
                .iter()
                .filter(|e| e.device_class_name == class)
                .map(|e| count(e.allocation_mode.as_deref(), e.count))
                .sum::<i64>();
            let alternatives = request
                .first_available
                .iter()
                .flatten()
                .filter(|s| s.device_class_name == class)
                .map(|s| count(s.allocation_mode.as_deref(), s.count))
                .max()
                .unwrap_or(0);
            exact + alternatives
        })
        .sum()
}

/// How `template` asks for its devices (the allocation mode of its first request, or of that request's preferred
/// alternative) and what one claim of it is charged in devices (`class` is the config's DeviceClass).
pub fn template_request(template: &ResourceClaimTemplate, class: &str) -> TemplateRequest {
    let first = template.spec.spec.devices.as_ref().and_then(|d| d.requests.as_ref()?.first());
    let mode = first.and_then(|r| match (&r.exactly, &r.first_available) {
        (Some(exactly), _) => exactly.allocation_mode.clone(),
        (None, Some(alternatives)) => alternatives.first()?.allocation_mode.clone(),
        (None, None) => None,
    });
    TemplateRequest {
        template: template.name_any(),
        allocation_mode: mode.unwrap_or_else(|| "ExactCount".to_string()),
        charge: Amount::charge(template, class).in_devices(),
    }
}

/// Figures on a budget's two quota keys: devices of the config's DeviceClass, and UltraServer node entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Amount {
    pub devices: i64,
    pub node_entries: i64,
}

impl Amount {
    /// What one claim of `template` is charged on each key (`class` is the config's DeviceClass).
    pub fn charge(template: &ResourceClaimTemplate, class: &str) -> Amount {
        Amount {
            devices: charge(template, class),
            node_entries: charge(template, &ultra_server_node_class_name(class)),
        }
    }

    /// In devices: a node entry as the devices of its node.
    pub fn in_devices(&self) -> i64 {
        self.devices.saturating_add(self.node_entries.saturating_mul(ULTRA_SERVER_NODE_DEVICES))
    }
}

/// One namespace's budget and what its ResourceQuota reports as used, per key.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub namespace: String,
    pub hard: Amount,
    /// None until Kubernetes has counted the namespace's claims on both keys.
    pub used: Option<Amount>,
}

impl Budget {
    /// The budget the operator writes (`desired`) and what the cluster's copy of it (`cached`) reports as used,
    /// for the config's DeviceClass `class`.
    pub fn of(desired: &ResourceQuota, cached: Option<&ResourceQuota>, class: &str) -> Budget {
        let keys = [device_quota_key(class), device_quota_key(&ultra_server_node_class_name(class))];
        let hard = desired.spec.as_ref().and_then(|s| s.hard.as_ref());
        let hard = |key: &str| hard.and_then(|h| h.get(key)).and_then(|q| q.0.parse().ok()).unwrap_or(0);
        let used = cached.and_then(|q| q.status.as_ref()?.used.as_ref());
        let used = |key: &str| used.and_then(|u| u.get(key)).and_then(|q| q.0.parse().ok());
        Budget {
            namespace: desired.namespace().unwrap_or_default(),
            hard: Amount { devices: hard(&keys[0]), node_entries: hard(&keys[1]) },
            used: used(&keys[0]).zip(used(&keys[1])).map(|(devices, node_entries)| Amount { devices, node_entries }),
        }
    }
}

/// Each budget's status, with room per template of the namespace (`templates`: per namespace, each template's name
/// and charge) within both the budget and the cluster's room (`capacity`, per template name); bounded, with the
/// totals beside. Status speaks in devices: `hard`, `used` and each `charge` count a node entry as its node's.
pub fn teams(
    budgets: &[Budget],
    templates: &BTreeMap<String, Vec<(String, Amount)>>,
    capacity: &[TemplateCapacity],
) -> (Vec<TeamStatus>, TeamSummary) {
    let cluster_room: BTreeMap<&str, i64> = capacity.iter().map(|c| (c.template.as_str(), c.available)).collect();
    let held = |budget: &Budget| budget.used.unwrap_or_default();
    let at_quota = budgets.iter().filter(|b| held(b).in_devices() >= b.hard.in_devices()).count();
    let teams = budgets
        .iter()
        .take(MAX_LISTED)
        .map(|budget| {
            let used = held(budget);
            let left = Amount {
                devices: (budget.hard.devices - used.devices).max(0),
                node_entries: (budget.hard.node_entries - used.node_entries).max(0),
            };
            let room = templates
                .get(&budget.namespace)
                .into_iter()
                .flatten()
                .map(|(template, charge)| {
                    // Each key the template is charged on bounds it on its own.
                    let within_budget = [(charge.devices, left.devices), (charge.node_entries, left.node_entries)]
                        .into_iter()
                        .filter(|(charge, _)| *charge > 0)
                        .map(|(charge, left)| left / charge)
                        .min()
                        .unwrap_or(i64::MAX);
                    let within_cluster = cluster_room.get(template.as_str()).copied().unwrap_or(i64::MAX);
                    let fits = within_budget.min(within_cluster);
                    // A template charged nothing with no capacity figure yet: say nothing rather than i64::MAX.
                    TeamRoom {
                        template: template.clone(),
                        charge: charge.in_devices(),
                        fits: if fits == i64::MAX { 0 } else { fits },
                    }
                })
                .collect();
            let node_entries = budget.used.map(|u| u.node_entries);
            let ultra_server_nodes = (budget.hard.node_entries > 0 || node_entries.unwrap_or(0) > 0)
                .then_some(TeamNodeEntries { hard: budget.hard.node_entries, used: node_entries });
            TeamStatus {
                namespace: budget.namespace.clone(),
                hard: budget.hard.in_devices(),
                used: budget.used.map(|u| u.in_devices()),
                ultra_server_nodes,
                room,
            }
        })
        .collect();
    (teams, TeamSummary { namespaces: budgets.len() as i64, at_quota: at_quota as i64 })
}

#[cfg(test)]
mod tests;
