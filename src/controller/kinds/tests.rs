use super::*;

/// Every (group, resource, verb) the table needs is granted by some rule of the shipped ClusterRole.
#[test]
fn the_shipped_role_grants_what_the_table_needs() {
    let role: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string("config/rbac/role.yaml").unwrap()).unwrap();
    let rules = role["rules"].as_sequence().unwrap();
    let has = |list: &serde_yaml::Value, item: &str| {
        list.as_sequence().unwrap().iter().any(|v| v.as_str() == Some(item) || v.as_str() == Some("*"))
    };
    let owned = owned().into_iter().map(|k| (k.group, k.plural, k.verbs));
    let read = READ.iter().map(|(group, resource, verbs)| (group.to_string(), resource.to_string(), *verbs));
    for (group, resource, verbs) in owned.chain(read) {
        for verb in verbs {
            let granted = rules.iter().any(|rule| {
                has(&rule["apiGroups"], &group) && has(&rule["resources"], &resource) && has(&rule["verbs"], verb)
            });
            assert!(granted, "config/rbac/role.yaml does not grant {verb} on {group}/{resource}");
        }
    }
}

#[test]
fn the_docs_list_exactly_the_kinds_of_the_table() {
    let docs = std::fs::read_to_string("docs/architecture.md").unwrap();
    let table = rbac_table();
    assert!(docs.contains(&table), "docs/architecture.md must hold this table, as it is:\n{table}");
}

#[test]
fn the_table_follows_the_apply_order() {
    let yaml = "apiVersion: neurondra.io/v1alpha1\nkind: NeuronDRAConfig\nmetadata: {name: pool}\n\
                    spec: {profiles: [{name: p, training: {devices: 4}}]}";
    let config = crate::logic::validate::validate(&crate::cli::parse_config(yaml).unwrap()).unwrap();
    let desired =
        crate::logic::desired::build(&config, &["team".to_string()]).with_quotas(&config, &[("team".into(), 8)]);
    let mut applied: Vec<String> = Vec::new();
    for (_, object) in desired.in_order() {
        let kind = serde_json::to_value(object).unwrap()["kind"].as_str().unwrap().to_string();
        if !applied.contains(&kind) && kind != "Namespace" && kind != "DeviceClass" {
            applied.push(kind);
        }
    }
    let table: Vec<String> = owned().into_iter().map(|k| k.kind).filter(|k| k != "DeviceClass").collect();
    assert_eq!(applied, table);
}

#[test]
fn a_config_owns_three_driver_objects_and_its_templates() {
    assert_eq!(DRIVER_OBJECTS, 3);
    let kinds: Vec<String> = owned().into_iter().map(|k| k.kind).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("DeviceClass"), "released last");
    assert_eq!(kinds.last().map(String::as_str), Some("ResourceQuota"), "deleted first");
}
