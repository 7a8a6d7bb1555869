//! `render --kueue` against Kueue's own API (docs/kueue.md): the ClusterQueues, LocalQueues and ResourceFlavors it
//! prints pass a server-side dry run against Kueue's CRDs (schema and CEL rules), a broken ClusterQueue does not,
//! and the Configuration fragment has the fields and respects the limits of Kueue's `deviceClassMappings`.
//! Then Kueue's own manager, configured with that fragment, queues a team's Jobs that ask for the operator's
//! template: admitted up to the team's budget, the next held by Kueue until the first finishes; a whole node (`All`)
//! and fallbacks are refused by Kueue, as the profile's status says.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod fleet;
    pub mod kueue;
    pub mod scenario;
    pub mod tools;
}

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use neuron_dra_operator::cli::parse_config;
use neuron_dra_operator::logic::desired::kueue::{KueueObjects, LOCAL_QUEUE, build_kueue};
use neuron_dra_operator::logic::validate::validate;
use serde::Deserialize;
use serde_json::{Value, json};
use support::cluster::{self, eventually, kubeconfig, kubectl, kubectl_with, unique};
use support::fleet::Fleet;
use support::scenario::TIMEOUT;

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
    assert_eq!(
        configuration.feature_gates.get("KueueDRAIntegrationExtendedResource").copied(),
        extended.then_some(true)
    );
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

fn workloads(client: &kube::Client, namespace: &str) -> kube::Api<kube::api::DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "Workload");
    kube::Api::namespaced_with(client.clone(), namespace, &kube::api::ApiResource::from_gvk(&gvk))
}

/// The Workload Kueue made for Job `job`, if any.
async fn workload_of(client: &kube::Client, namespace: &str, job: &str) -> Option<kube::api::DynamicObject> {
    let list = workloads(client, namespace).list(&Default::default()).await.unwrap();
    list.items.into_iter().find(|w| w.metadata.owner_references.iter().flatten().any(|o| o.name == job))
}

/// A condition of a Workload: (status, reason, message).
fn condition(workload: &kube::api::DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let conditions = workload.data["status"]["conditions"].as_array()?;
    let c = conditions.iter().find(|c| c["type"] == type_)?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// A suspended Job in Kueue's queue `neuron` whose one pod asks for a claim from the operator's `template`.
fn queued_job(name: &str, template: &str, affinity: &Value) -> Value {
    let pod = support::allocation::workload_pod(name, template, affinity);
    let mut spec = pod["spec"].clone();
    spec["restartPolicy"] = json!("Never");
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE}},
        "spec": {"suspend": true, "backoffLimit": 0, "template": {"metadata": {"labels": pod["metadata"]["labels"]},
            "spec": spec}}})
}

/// Waits until Kueue has admitted Job `job` and its pod is bound to a node; returns the pod's name.
async fn wait_running(client: &kube::Client, namespace: &str, job: &str) -> String {
    use k8s_openapi::api::core::v1::Pod;
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
    eventually(TIMEOUT, &format!("job {job} admitted and its pod scheduled"), || async {
        let admitted = workload_of(client, namespace, job).await.and_then(|w| condition(&w, "Admitted"));
        if admitted.is_none_or(|(status, ..)| status != "True") {
            return None;
        }
        let list = pods.list(&kube::api::ListParams::default().labels(&format!("job-name={job}"))).await.unwrap();
        list.items.into_iter().find(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())).map(|p| p.name_any())
    })
    .await
}

/// Waits until Kueue holds Job `job` back (its Workload's `QuotaReserved` is `False` with a message); returns why.
async fn held_by_kueue(client: &kube::Client, namespace: &str, job: &str) -> String {
    eventually(TIMEOUT, &format!("job {job} held by Kueue"), || async {
        let (status, _, message) = condition(&workload_of(client, namespace, job).await?, "QuotaReserved")?;
        (status == "False" && !message.is_empty()).then_some(message)
    })
    .await
}

/// Reports the pod finished as its kubelet would: its container exited 0.
async fn succeed(client: &kube::Client, namespace: &str, pod: &str) {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), namespace);
    let now = neuron_dra_operator::logic::status::now().to_string();
    let status = json!({"status": {"phase": "Succeeded", "conditions": [
        {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}],
        "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0, "image": "registry.example/trainer:1",
            "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}}}]}});
    pods.patch_status(pod, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&status)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_admits_a_teams_jobs_up_to_its_budget_and_holds_the_next() {
    let f = Fleet::start("kueue", &[("trn2.48xlarge", 1)]).await;
    let s = &f.scenario;
    let client = &s.client;
    let job_label = ("neurondra.io/kueue-test", s.id.as_str());
    let team = s.namespace("team", &[job_label]).await;
    // 16 devices on the node, a budget of 8: two jobs of 4 run, the third waits in Kueue's queue. A whole node
    // (`All`) and fallbacks are what Kueue cannot count: the status says so, and Kueue agrees.
    let profiles = json!([{"name": "quad", "training": {"devices": 4}}, {"name": "node", "training": {}},
        {"name": "node16", "training": {"devices": 16}},
        {"name": "elastic", "training": {"devices": 16, "fallbacks": [{"devices": 8}]}}]);
    let spec = json!({"nodeSelector": f.node_selector(), "templates": {"namespaces": [&team]}, "profiles": profiles,
        "quotas": [{"namespaces": [&team], "devices": 8}]});
    let document = s.config(&s.id, spec);
    s.apply(&document).await.unwrap();
    s.wait_templates(&team, &["quad", "node", "node16", "elastic"]).await;
    let status = f.wait_status("Kueue's verdict per profile", |st| st.profiles.iter().all(|p| p.kueue.is_some())).await;
    let verdict: BTreeMap<&str, bool> =
        status.profiles.iter().map(|p| (p.name.as_str(), p.kueue.as_ref().unwrap().admissible)).collect();
    // Before 1.36 a whole node is `All` even as `devices: 16` (docs/decisions.md, "Whole nodes on a busy fleet").
    let version = client.apiserver_version().await.unwrap();
    let counts_whole_nodes = version.minor.trim_end_matches('+').parse::<u32>().unwrap() >= 36;
    let expected = [("quad", true), ("node", false), ("node16", counts_whole_nodes), ("elastic", false)];
    assert_eq!(verdict, BTreeMap::from(expected));

    let config = validate(&parse_config(&serde_json::to_string(&document).unwrap()).unwrap()).unwrap();
    let objects = build_kueue(&config).unwrap();
    let printed = documents(&objects);
    let manager = support::kueue::Manager::start(&s.id, &printed[0], job_label);
    let stream: String = printed[1..].iter().map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap())).collect();
    kubectl_with(&kubeconfig(), &["apply", "--server-side", "-f", "-"], Some(&stream)).unwrap();

    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(client.clone(), &team);
    let params = kube::api::PatchParams::apply("test").force();
    for name in ["a", "b", "c"] {
        let job = queued_job(name, "quad", &f.pod_affinity());
        jobs.patch(name, &params, &kube::api::Patch::Apply(&job)).await.unwrap();
        if name != "c" {
            wait_running(client, &team, name).await;
        }
    }
    let first = wait_running(client, &team, "a").await;
    // The third is held by Kueue for the team's quota, not by the cluster (8 devices are still free on the node).
    let held = held_by_kueue(client, &team, "c").await;
    assert!(held.contains("insufficient unused quota"), "{held}\n{}", manager.log());
    assert_eq!(jobs.get("c").await.unwrap().spec.unwrap().suspend, Some(true));
    for (name, template, why) in [
        ("whole", "node", "AllocationMode 'All' is not supported"),
        ("flexible", "elastic", "FirstAvailable device selection is not supported"),
        // The whole node as a count (from 1.36): counted, and charged against the budget of 8; before, `All`.
        (
            "sixteen",
            "node16",
            match counts_whole_nodes {
                true => "current podset request (16) > maximum capacity (8)",
                false => "AllocationMode 'All' is not supported",
            },
        ),
    ] {
        let job = queued_job(name, template, &f.pod_affinity());
        jobs.patch(name, &params, &kube::api::Patch::Apply(&job)).await.unwrap();
        let held = held_by_kueue(client, &team, name).await;
        assert!(held.contains(why), "{held}");
    }

    succeed(client, &team, &first).await;
    wait_running(client, &team, "c").await;
    let finished = workload_of(client, &team, "a").await.and_then(|w| condition(&w, "Finished"));
    assert_eq!(finished.map(|c| c.0), Some("True".to_string()));

    // The namespace first, while the manager still runs to release its Workloads' finalizers.
    let _ = kubectl_with(&kubeconfig(), &["delete", "namespace", &team, "--timeout=30s"], None);
    f.clear().await;
    drop(manager);
}
