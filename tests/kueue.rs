//! `render --kueue` against Kueue's own API (docs/kueue.md): the ClusterQueues, LocalQueues and ResourceFlavors it
//! prints pass a server-side dry run against Kueue's CRDs (schema and CEL rules), a broken ClusterQueue does not,
//! and the Configuration fragment has the fields and respects the limits of Kueue's `deviceClassMappings`.

mod support {
    pub mod cluster;
    pub mod tools;
}

use std::collections::{BTreeMap, BTreeSet};

use neuron_dra_operator::cli::parse_config;
use neuron_dra_operator::logic::build::kueue::{KueueObjects, build_kueue};
use neuron_dra_operator::logic::validate::validate;
use serde::Deserialize;
use serde_json::{Value, json};
use support::cluster::{self, kubeconfig, kubectl, kubectl_with, unique};

/// The Kueue CRDs that the printed objects need.
const KUEUE_CRDS: [&str; 3] = ["resourceflavors", "clusterqueues", "localqueues"];

fn install_kueue_crds() {
    let dir = support::tools::kueue_crds();
    for crd in KUEUE_CRDS {
        let file = dir.join(format!("kueue.x-k8s.io_{crd}.yaml"));
        kubectl(&["apply", "--server-side", "--force-conflicts", "-f", file.to_str().unwrap()]);
        cluster::wait_established(&format!("{crd}.kueue.x-k8s.io"));
    }
}

fn render(name: &str, spec: Value) -> KueueObjects {
    let doc = json!({"apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig", "metadata": {"name": name},
        "spec": spec});
    let config = validate(&parse_config(&serde_json::to_string(&doc).unwrap()).unwrap()).unwrap();
    build_kueue(&config).unwrap()
}

/// The documents of the printed stream, as the binary prints them.
fn documents(objects: &KueueObjects) -> Vec<Value> {
    let yaml = objects.to_yaml().unwrap();
    yaml.split("---\n").filter(|d| !d.trim().is_empty()).map(|d| serde_yaml::from_str(d).unwrap()).collect()
}

fn dry_run(documents: &[Value]) -> Result<String, String> {
    let stream: String =
        documents.iter().map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap())).collect::<Vec<_>>().concat();
    kubectl_with(&kubeconfig(), &["apply", "--server-side", "--dry-run=server", "-f", "-"], Some(&stream))
}

/// Kueue's `Configuration` fields that the fragment may hold (`apis/config/v1beta2/configuration_types.go`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Configuration {
    api_version: String,
    kind: String,
    feature_gates: BTreeMap<String, bool>,
    resources: Resources,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Resources {
    device_class_mappings: Vec<DeviceClassMapping>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DeviceClassMapping {
    name: String,
    device_class_names: Vec<String>,
}

/// Kueue's `content.IsLabelKey`: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
fn is_label_key(key: &str) -> bool {
    let name = regex::Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").unwrap();
    let prefix = regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap();
    let (p, n) = key.rsplit_once('/').map_or((None, key), |(p, n)| (Some(p), n));
    p.is_none_or(|p| p.len() <= 253 && prefix.is_match(p)) && n.len() <= 63 && name.is_match(n)
}

/// The checks of `validateDeviceClassMappings` (`pkg/config/validation.go`).
fn check_configuration(document: &Value, extended: bool) {
    let configuration: Configuration = serde_json::from_value(document.clone()).expect("Kueue's Configuration fields");
    assert_eq!(configuration.api_version, "config.kueue.x-k8s.io/v1beta2");
    assert_eq!(configuration.kind, "Configuration");
    assert_eq!(configuration.feature_gates.get("KueueDRAIntegration"), Some(&true));
    assert_eq!(configuration.feature_gates.get("KueueDRAIntegrationExtendedResource").copied(), extended.then_some(true));
    let mappings = &configuration.resources.device_class_mappings;
    assert!(!mappings.is_empty() && mappings.len() <= 16, "1 to 16 mappings");
    let mut names = BTreeSet::new();
    let mut class_owner = BTreeMap::new();
    for mapping in mappings {
        assert!(is_label_key(&mapping.name) && mapping.name.len() <= 253, "{} is a label key", mapping.name);
        assert!(names.insert(&mapping.name), "duplicate mapping {}", mapping.name);
        let classes = &mapping.device_class_names;
        assert!(!classes.is_empty() && classes.len() <= 8, "1 to 8 classes per mapping");
        assert_eq!(classes.iter().collect::<BTreeSet<_>>().len(), classes.len(), "no duplicate class");
        for class in classes {
            assert!(is_label_key(class) && class.len() <= 253, "{class} is a label key");
            let owner = class_owner.entry(class.clone()).or_insert(&mapping.name);
            assert_eq!(*owner, &mapping.name, "{class} maps to one name only");
        }
    }
}

#[test]
fn kueue_accepts_every_object_render_prints() {
    install_kueue_crds();
    let teams = [unique("kueue-a"), unique("kueue-b")];
    for team in &teams {
        kubectl(&["create", "namespace", team]);
    }
    let config = unique("kq");
    let cases = [
        // Every supported type: one flavor without node labels; the extended resource names the quota; a node entry.
        (
            json!({"extendedResourceName": "aws.amazon.com/neuron", "quotas": [
            {"namespaces": [&teams[0], &teams[1]], "devices": 16, "ultraServerNodes": 1},
            {"namespaceSelector": {"matchLabels": {"team": "x"}}, "devices": 4}]}),
            true,
        ),
        // One instance type: its flavor with node labels; the class names the quota.
        (
            json!({"deviceClassName": "trn2.neuron.aws.com",
            "nodeSelector": {"matchLabels": {"node.kubernetes.io/instance-type": "trn2.48xlarge"}},
            "quotas": [{"namespaces": [&teams[0]], "devices": 0}]}),
            false,
        ),
    ];
    let mut result = Ok(());
    for (spec, extended) in cases {
        let objects = render(&config, spec);
        let documents = documents(&objects);
        assert_eq!(documents[0]["kind"], "Configuration");
        check_configuration(&documents[0], extended);
        let served = &documents[1..];
        let kinds: BTreeSet<&str> = served.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, BTreeSet::from(["ClusterQueue", "LocalQueue", "ResourceFlavor"]));
        if let Err(e) = dry_run(served) {
            result = Err(format!("the API server refused the printed objects:\n{e}"));
            break;
        }

        // The negative check: the same ClusterQueue without a cohort breaks Kueue's CEL rule, so the dry run can fail.
        let mut broken = served.iter().find(|d| d["kind"] == "ClusterQueue").unwrap().clone();
        broken["spec"].as_object_mut().unwrap().remove("cohortName");
        let refused = dry_run(&[broken]).expect_err("a ClusterQueue with borrowingLimit and no cohort is refused");
        assert!(refused.contains("borrowingLimit must be nil when cohort is empty"), "{refused}");
    }
    for team in &teams {
        let _ = kubectl_with(&kubeconfig(), &["delete", "namespace", team, "--wait=false"], None);
    }
    result.unwrap();
}
