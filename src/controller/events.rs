//! events: what the operator tells users through Kubernetes Events on the config, once per change.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

use super::Context;
use super::act::operands::Report;
use super::act::publish::publish;
use crate::api::NeuronDRAConfigStatus;
use crate::logic::health;
use crate::logic::text::first_of;

/// One Warning event per category of failure (`Forbidden`, `Conflict`, ...): see `grouped`.
pub async fn failures(ctx: &Context, reference: &ObjectReference, failures: Vec<(&'static str, String)>) {
    for (category, note) in grouped(failures) {
        publish(ctx, reference, EventType::Warning, category, "Reconcile", note).await;
    }
}

/// The failures of one pass by category, each with its first message and how many more failed alike. A pass that
/// fails a hundred writes (the API server going away, or throttling it) would otherwise post a hundred events, each
/// one more request to a server that is already failing them.
fn grouped(failures: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    let mut by_category: std::collections::BTreeMap<&'static str, (String, usize)> = Default::default();
    for (category, note) in failures {
        by_category.entry(category).or_insert((note, 0)).1 += 1;
    }
    by_category
        .into_iter()
        .map(|(category, (first, count))| match count {
            1 => (category, first),
            n => (category, format!("{first} (and {} more alike)", n - 1)),
        })
        .collect()
}

/// One Normal event per kind of change (`Created`, `Updated`, `Replaced`, `Deleted`), naming a bounded list.
pub async fn changes(ctx: &Context, reference: &ObjectReference, report: &Report) {
    const SHOWN: usize = 8;
    for (reason, items) in [
        ("Created", &report.created),
        ("Updated", &report.updated),
        ("Replaced", &report.replaced),
        ("Deleted", &report.deleted),
    ] {
        if !items.is_empty() {
            publish(
                ctx,
                reference,
                EventType::Normal,
                reason,
                "Apply",
                format!("{reason} {}", first_of(items, SHOWN, ", ")),
            )
            .await;
        }
    }
}

/// An event when devices turn unhealthy or recover; nothing when the set is unchanged.
pub async fn health(
    ctx: &Context,
    reference: &ObjectReference,
    previous: Option<&NeuronDRAConfigStatus>,
    assessment: &health::Assessment,
) {
    let unhealthy = &assessment.unhealthy;
    let name = reference.name.clone().unwrap_or_default();
    let in_use_before = {
        let mut seen = ctx.in_use_seen.lock().expect("not poisoned");
        seen.insert(name.clone(), assessment.affected_claims.clone()).unwrap_or_else(|| {
            previous.iter().flat_map(|s| &s.unhealthy_devices).filter_map(|d| d.claim.clone()).collect()
        })
    };
    let newly_in_use: Vec<&String> = assessment.affected_claims.difference(&in_use_before).collect();
    if !newly_in_use.is_empty() {
        let shown: Vec<&str> = newly_in_use.iter().take(10).map(|c| c.as_str()).collect();
        let note = format!("unhealthy devices are allocated to claims: {}", shown.join(", "));
        publish(ctx, reference, EventType::Warning, "UnhealthyDeviceInUse", "Health", note).await;
    }
    let before = {
        let mut seen = ctx.unhealthy_seen.lock().expect("not poisoned");
        let before = seen.get(&name).cloned().unwrap_or_else(|| {
            // After a restart: what the status already reports is not news.
            previous.iter().flat_map(|s| &s.unhealthy_devices).map(|d| (d.node.clone(), d.device.clone())).collect()
        });
        seen.insert(name, unhealthy.clone());
        before
    };
    let list = |items: Vec<&(String, String)>| {
        first_of(items.iter().map(|(node, device)| format!("{node}/{device}")), 10, ", ")
    };
    let turned: Vec<_> = unhealthy.difference(&before).collect();
    if !turned.is_empty() {
        let note = format!("devices turned unhealthy: {}", list(turned));
        publish(ctx, reference, EventType::Warning, "DeviceUnhealthy", "Health", note).await;
    }
    let recovered: Vec<_> = before.difference(unhealthy).collect();
    if !recovered.is_empty() {
        let note = format!("devices recovered: {}", list(recovered));
        publish(ctx, reference, EventType::Normal, "DeviceRecovered", "Health", note).await;
    }
}

#[cfg(test)]
mod tests {
    use super::grouped;

    #[test]
    fn one_warning_per_category_with_its_first_message_and_a_count() {
        let failures = vec![
            ("Forbidden", "applying A: forbidden".to_string()),
            ("ApplyFailed", "applying B: timed out".to_string()),
            ("Forbidden", "applying C: forbidden".to_string()),
            ("Forbidden", "applying D: forbidden".to_string()),
        ];
        assert_eq!(
            grouped(failures),
            [
                ("ApplyFailed", "applying B: timed out".to_string()),
                ("Forbidden", "applying A: forbidden (and 2 more alike)".to_string()),
            ]
        );
    }
}
