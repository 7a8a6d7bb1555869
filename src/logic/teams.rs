//! teams (pure): what a claim is charged against a device budget, and each team namespace's room.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::ResourceClaimTemplate;

use crate::api::{TeamRoom, TeamStatus, TeamSummary, TemplateCapacity};
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

/// One namespace's budget and what its ResourceQuota reports as used.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub namespace: String,
    pub hard: i64,
    /// None until Kubernetes has counted the namespace's claims.
    pub used: Option<i64>,
}

/// Each budget's status, with room per template of the namespace (`charges`: template name to charge) within both
/// the budget and the cluster's room (`capacity`, per template name); bounded, with the totals beside.
pub fn teams(
    budgets: &[Budget],
    templates: &BTreeMap<String, Vec<(String, i64)>>,
    capacity: &[TemplateCapacity],
) -> (Vec<TeamStatus>, TeamSummary) {
    let cluster_room: BTreeMap<&str, i64> = capacity.iter().map(|c| (c.template.as_str(), c.available)).collect();
    let at_quota = budgets.iter().filter(|b| b.used.unwrap_or(0) >= b.hard).count();
    let teams = budgets
        .iter()
        .take(MAX_LISTED)
        .map(|budget| {
            let left = (budget.hard - budget.used.unwrap_or(0)).max(0);
            let room = templates
                .get(&budget.namespace)
                .into_iter()
                .flatten()
                .map(|(template, charge)| {
                    let within_budget = if *charge > 0 { left / charge } else { i64::MAX };
                    let within_cluster = cluster_room.get(template.as_str()).copied().unwrap_or(i64::MAX);
                    let fits = within_budget.min(within_cluster);
                    // A template charged nothing with no capacity figure yet: say nothing rather than i64::MAX.
                    TeamRoom {
                        template: template.clone(),
                        charge: *charge,
                        fits: if fits == i64::MAX { 0 } else { fits },
                    }
                })
                .collect();
            TeamStatus { namespace: budget.namespace.clone(), hard: budget.hard, used: budget.used, room }
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

    #[test]
    fn room_is_the_smaller_of_the_budget_and_the_cluster() {
        let budgets = [
            Budget { namespace: "a".into(), hard: 16, used: Some(4) },
            Budget { namespace: "b".into(), hard: 8, used: Some(8) },
            Budget { namespace: "c".into(), hard: 8, used: None },
        ];
        let per_namespace = vec![("pretrain".to_string(), 4), ("serve".to_string(), 1)];
        let templates: BTreeMap<String, Vec<(String, i64)>> =
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
