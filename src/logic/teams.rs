//! teams (pure): what a claim is charged against a device budget, and each team namespace's room. A budget is two
//! quota keys: devices of the config's DeviceClass, and UltraServer node entries of `ultraserver-nodes.<class>`,
//! each node entry standing for `ULTRA_SERVER_NODE_DEVICES` devices; the status adds them up in devices.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::ResourceExt;

use crate::api::{TeamNodeEntries, TeamRoom, TeamStatus, TeamSummary, TemplateCapacity};
use crate::logic::build::{device_quota_key, ultra_server_node_class_name};
use crate::logic::catalog::ULTRA_SERVER_NODE_DEVICES;
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
mod tests {
    use super::*;
    use serde_json::json;

    fn template(requests: serde_json::Value) -> ResourceClaimTemplate {
        serde_json::from_value(json!({
            "metadata": {"name": "t"},
            "spec": {"spec": {"devices": {"requests": requests}}},
        }))
        .unwrap()
    }

    #[test]
    fn a_claim_is_charged_as_the_quota_evaluator_counts() {
        let exact = template(json!([{"name": "n", "exactly": {"deviceClassName": "neuron.aws.com", "count": 4}}]));
        assert_eq!(charge(&exact, "neuron.aws.com"), 4);
        assert_eq!(charge(&exact, "other"), 0);
        let default_count = template(json!([{"name": "n", "exactly": {"deviceClassName": "neuron.aws.com"}}]));
        assert_eq!(charge(&default_count, "neuron.aws.com"), 1);
        let all = template(json!([{"name": "n", "exactly":
            {"deviceClassName": "neuron.aws.com", "allocationMode": "All"}}]));
        assert_eq!(charge(&all, "neuron.aws.com"), ALL_DEVICES_CHARGE);
        // The largest alternative, not the first choice; EFA's class is not charged to Neuron's key.
        let fallbacks = template(json!([
            {"name": "n", "firstAvailable": [
                {"name": "a", "deviceClassName": "neuron.aws.com", "count": 2},
                {"name": "b", "deviceClassName": "neuron.aws.com", "count": 8},
                {"name": "c", "deviceClassName": "neuron.aws.com", "count": 1}]},
            {"name": "e", "exactly": {"deviceClassName": "efa.networking.k8s.aws", "count": 8}},
        ]));
        assert_eq!(charge(&fallbacks, "neuron.aws.com"), 8);
    }

    fn devices(devices: i64) -> Amount {
        Amount { devices, node_entries: 0 }
    }

    #[test]
    fn a_node_entry_claim_is_charged_on_its_own_key_as_its_nodes_devices() {
        let node = template(json!([{"name": "n", "exactly":
            {"deviceClassName": "ultraserver-nodes.neuron.aws.com", "count": 1}}]));
        let charged = Amount::charge(&node, "neuron.aws.com");
        assert_eq!(charged, Amount { devices: 0, node_entries: 1 });
        assert_eq!(charged.in_devices(), ULTRA_SERVER_NODE_DEVICES);
        let quad = template(json!([{"name": "n", "exactly": {"deviceClassName": "neuron.aws.com", "count": 4}}]));
        assert_eq!(Amount::charge(&quad, "neuron.aws.com"), devices(4));
    }

    #[test]
    fn a_budget_reads_both_keys_and_is_counted_only_once_both_are() {
        let quota = |hard: serde_json::Value, used: Option<serde_json::Value>| -> ResourceQuota {
            serde_json::from_value(json!({
                "metadata": {"name": "neuron-dra-pool", "namespace": "team"},
                "spec": {"hard": hard},
                "status": used.map(|used| json!({"used": used})),
            }))
            .unwrap()
        };
        let hard = json!({"neuron.aws.com.deviceclass.resource.k8s.io/devices": "16",
            "ultraserver-nodes.neuron.aws.com.deviceclass.resource.k8s.io/devices": "1"});
        let desired = quota(hard.clone(), None);
        let counted = quota(
            hard.clone(),
            Some(json!({"neuron.aws.com.deviceclass.resource.k8s.io/devices": "4",
            "ultraserver-nodes.neuron.aws.com.deviceclass.resource.k8s.io/devices": "1"})),
        );
        let budget = Budget::of(&desired, Some(&counted), "neuron.aws.com");
        assert_eq!(budget.namespace, "team");
        assert_eq!(budget.hard, Amount { devices: 16, node_entries: 1 });
        assert_eq!(budget.used, Some(Amount { devices: 4, node_entries: 1 }));
        // A quota whose node key Kubernetes has not counted yet (just added to an older quota) is not counted.
        let half = quota(hard, Some(json!({"neuron.aws.com.deviceclass.resource.k8s.io/devices": "4"})));
        assert_eq!(Budget::of(&desired, Some(&half), "neuron.aws.com").used, None);
        assert_eq!(Budget::of(&desired, None, "neuron.aws.com").used, None);
    }

    #[test]
    fn node_entries_are_charged_and_have_room_as_their_nodes_devices() {
        let node = Amount { devices: 0, node_entries: 1 };
        let templates: BTreeMap<String, Vec<(String, Amount)>> = ["small", "us"]
            .iter()
            .map(|ns| (ns.to_string(), vec![("one".to_string(), devices(1)), ("us1".to_string(), node)]))
            .collect();
        let budgets = [
            // Budget 4, no node entries: the node-entry template is charged 16 and never fits.
            Budget { namespace: "small".into(), hard: devices(4), used: Some(devices(0)) },
            // Budget 16, all of it one node entry, held: no room for either.
            Budget { namespace: "us".into(), hard: node, used: Some(node) },
        ];
        let (listed, summary) = teams(&budgets, &templates, &[]);
        let room = |team: &TeamStatus| -> Vec<(String, i64, i64)> {
            team.room.iter().map(|r| (r.template.clone(), r.charge, r.fits)).collect()
        };
        let expected = |one: i64, us1: i64| vec![("one".to_string(), 1, one), ("us1".to_string(), 16, us1)];
        assert_eq!(room(&listed[0]), expected(4, 0));
        assert_eq!((listed[0].hard, listed[0].used, listed[0].ultra_server_nodes.clone()), (4, Some(0), None));
        assert_eq!(room(&listed[1]), expected(0, 0));
        assert_eq!(
            (listed[1].hard, listed[1].used, listed[1].ultra_server_nodes.clone()),
            (16, Some(16), Some(TeamNodeEntries { hard: 1, used: Some(1) }))
        );
        assert_eq!(summary, TeamSummary { namespaces: 2, at_quota: 1 });

        // Budget 48 with 2 node entries, one held, and 8 devices held: 8 devices and 1 node entry left.
        let budgets = [Budget {
            namespace: "us".into(),
            hard: Amount { devices: 16, node_entries: 2 },
            used: Some(Amount { devices: 8, node_entries: 1 }),
        }];
        let (listed, summary) = teams(&budgets, &templates, &[]);
        assert_eq!(room(&listed[0]), expected(8, 1));
        assert_eq!((listed[0].hard, listed[0].used), (48, Some(24)));
        assert_eq!(summary.at_quota, 0);
    }

    #[test]
    fn room_is_the_smaller_of_the_budget_and_the_cluster() {
        let budgets = [
            Budget { namespace: "a".into(), hard: devices(16), used: Some(devices(4)) },
            Budget { namespace: "b".into(), hard: devices(8), used: Some(devices(8)) },
            Budget { namespace: "c".into(), hard: devices(8), used: None },
        ];
        let per_namespace = vec![("pretrain".to_string(), devices(4)), ("serve".to_string(), devices(1))];
        let templates: BTreeMap<String, Vec<(String, Amount)>> =
            ["a", "b"].iter().map(|ns| (ns.to_string(), per_namespace.clone())).collect();
        let capacity = [
            TemplateCapacity { template: "pretrain".into(), allocated: 1, available: 2 },
            TemplateCapacity { template: "serve".into(), allocated: 0, available: 100 },
        ];
        let (teams, summary) = teams(&budgets, &templates, &capacity);
        let fits = |team: &TeamStatus| team.room.iter().map(|r| r.fits).collect::<Vec<_>>();
        assert_eq!(fits(&teams[0]), [2, 12], "the cluster holds 2 pretrain; the budget 12 serve");
        assert_eq!(fits(&teams[1]), [0, 0], "at its budget");
        assert!(teams[2].room.is_empty(), "no templates there");
        assert_eq!(summary, TeamSummary { namespaces: 3, at_quota: 1 });
    }
}
