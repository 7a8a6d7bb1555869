use super::*;

fn claimant(name: &str, created: i64, nodes: &[&str], templates: &[(&str, &str)]) -> Claimant {
    Claimant {
        name: name.into(),
        created: (created, name.into()),
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        templates: templates.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect(),
        extended_resource: None,
    }
}

fn serving(mut claimant: Claimant, class: &str, resource: &str) -> Claimant {
    claimant.extended_resource = Some((class.into(), resource.into()));
    claimant
}

#[test]
fn one_device_class_cannot_serve_two_extended_resources() {
    let old = serving(claimant("old", 1, &["n1"], &[]), "neuron.aws.com", "aws.amazon.com/neuron");
    let new = serving(claimant("new", 2, &["n2"], &[]), "neuron.aws.com", "example.com/neuron");
    let all = [old.clone(), new.clone()];
    assert!(find_conflicts(&old, &all).is_empty(), "the older config keeps its class");
    let found = find_conflicts(&new, &all);
    assert_eq!(
        found.message(),
        "deviceClassName neuron.aws.com already serves extendedResourceName aws.amazon.com/neuron for old; \
             the DeviceClass devices.neuron.aws.com is not applied"
    );
    // The same resource, another class, or no extended resource at all: nothing to fight over.
    let same = serving(claimant("same", 3, &["n3"], &[]), "neuron.aws.com", "aws.amazon.com/neuron");
    let other_class = serving(claimant("other", 4, &["n4"], &[]), "trn.example.com", "example.com/neuron");
    let plain = claimant("plain", 5, &["n5"], &[]);
    let all = [old, same.clone(), other_class.clone(), plain.clone()];
    for me in [same, other_class, plain] {
        assert!(find_conflicts(&me, &all).is_empty(), "{}", me.name);
    }
}

#[test]
fn the_older_config_wins_and_the_newer_reports_what_overlaps() {
    let old = claimant("old", 1, &["n1", "n2"], &[("a", "pretrain")]);
    let new = claimant("new", 2, &["n2", "n3"], &[("a", "pretrain"), ("b", "pretrain")]);
    let all = [old.clone(), new.clone()];
    assert!(find_conflicts(&old, &all).is_empty());
    let found = find_conflicts(&new, &all);
    assert_eq!(found.nodes, BTreeMap::from([("n2".to_string(), "old".to_string())]));
    assert_eq!(found.templates.keys().collect::<Vec<_>>(), [&("a".to_string(), "pretrain".to_string())]);
    assert_eq!(
        found.message(),
        "nodes n2 are already selected by old; the plugin DaemonSet is kept as it is, not created or updated; \
             templates a/pretrain already belong to old; they are not written (one of this config's own is kept)"
    );
}

#[test]
fn same_creation_time_breaks_ties_by_name() {
    let a = claimant("a", 1, &["n"], &[]);
    let b = claimant("b", 1, &["n"], &[]);
    let all = [a.clone(), b.clone()];
    assert!(find_conflicts(&a, &all).is_empty());
    assert!(!find_conflicts(&b, &all).is_empty());
}
