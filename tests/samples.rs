//! `kubectl apply -k config/samples` and the workloads in `examples/`, on a simulated fleet of the samples' three
//! node groups: every config Ready and none in Conflict, and every example pod bound by the real scheduler to its
//! pool with its devices. Names are made this test's own (configs, namespaces and node-group values get the test's
//! id in front; configs carry the test label the test's operator selects); everything else is applied as written.

mod support {
    pub mod allocation;
    pub mod cluster;
    pub mod fleet;
    pub mod scenario;
    pub mod tools;
}

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use support::allocation::{claim_of, create_pod, wait_scheduled};
use support::cluster::{TEST_LABEL, documents, eventually, kubectl, kubectl_with, repo};
use support::fleet::{Fleet, NodeGroup};
use support::scenario::Scenario;

/// The node-group label the samples select by (EKS managed node groups set it).
const NODE_GROUP: &str = "eks.amazonaws.com/nodegroup";
/// LeaderWorkerSet's group label and its exclusive-topology annotation (sigs.k8s.io/lws, api/leaderworkerset/v1).
const LWS_GROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/group-key";
const LWS_EXCLUSIVE: &str = "leaderworkerset.sigs.k8s.io/exclusive-topology";

fn kustomize(dir: &str) -> Vec<Value> {
    documents(&kubectl(&["kustomize", repo(dir).to_str().unwrap()]))
}

fn example(file: &str) -> Vec<Value> {
    documents(&std::fs::read_to_string(repo(&format!("examples/{file}"))).unwrap())
}

/// What makes the samples this test's own: `<id>-` in front of namespaces and node-group values.
struct Own<'a> {
    id: &'a str,
}

impl Own<'_> {
    fn name(&self, name: &Value) -> Value {
        json!(format!("{}-{}", self.id, name.as_str().unwrap()))
    }

    /// A pod spec's namespace-free parts: its node-group selector.
    fn pod_spec(&self, spec: &mut Value) {
        let group = &mut spec["nodeSelector"][NODE_GROUP];
        assert!(group.is_string(), "an example pod without a {NODE_GROUP} node selector: {spec}");
        *group = self.name(group);
    }

    fn workload(&self, mut object: Value) -> Value {
        object["metadata"]["namespace"] = self.name(&object["metadata"]["namespace"]);
        match object["kind"].as_str().unwrap() {
            "Pod" => self.pod_spec(&mut object["spec"]),
            "Job" => self.pod_spec(&mut object["spec"]["template"]["spec"]),
            "LeaderWorkerSet" => {
                let template = &mut object["spec"]["leaderWorkerTemplate"];
                self.pod_spec(&mut template["leaderTemplate"]["spec"]);
                self.pod_spec(&mut template["workerTemplate"]["spec"]);
            }
            "Service" | "PersistentVolumeClaim" => {}
            other => panic!("no example of kind {other}"),
        }
        object
    }
}

async fn apply<K>(api: &Api<K>, object: &Value) -> K
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().unwrap();
    api.patch(name, &PatchParams::apply("kubectl-test").force(), &Patch::Apply(object)).await.unwrap()
}

/// The pod's node after the scheduler bound it, and that its claim is allocated.
async fn bound(s: &Scenario, namespace: &str, name: &str) -> String {
    let pod = wait_scheduled(&s.client, namespace, name).await;
    claim_of(&s.client, &pod).await;
    pod.spec.unwrap().node_name.unwrap()
}

fn node_label(node: &str, key: &str) -> String {
    kubectl(&["get", "node", node, "-o", &format!("jsonpath={{.metadata.labels.{}}}", key.replace('.', "\\."))])
}

/// Applies a samples kustomization (its namespaces and configs) made this test's own; returns the configs' names.
async fn apply_samples(s: &Scenario, dir: &str) -> Vec<String> {
    let own = Own { id: &s.id };
    let mut configs = Vec::new();
    for mut object in kustomize(dir) {
        object["metadata"]["name"] = own.name(&object["metadata"]["name"]);
        object["metadata"]["labels"] = json!({TEST_LABEL: s.id});
        if object["kind"] == "Namespace" {
            apply(&Api::<k8s_openapi::api::core::v1::Namespace>::all(s.client.clone()), &object).await;
            continue;
        }
        assert_eq!(object["kind"], "NeuronDRAConfig");
        let spec = &mut object["spec"];
        let namespaces: Vec<Value> =
            spec["templates"]["namespaces"].as_array().unwrap().iter().map(|n| own.name(n)).collect();
        spec["templates"]["namespaces"] = json!(namespaces);
        let group = &mut spec["nodeSelector"]["matchLabels"][NODE_GROUP];
        *group = own.name(group);
        spec["driver"]["namespace"] = json!(s.driver_namespace());
        s.apply(&object).await.unwrap();
        configs.push(object["metadata"]["name"].as_str().unwrap().to_string());
    }
    configs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_samples_work_together_and_every_example_is_scheduled_in_its_pool() {
    let groups = [
        NodeGroup::new("trn2.48xlarge", 3).named("trn2-training"),
        NodeGroup::new("trn2u.48xlarge", 4).named("trn2u-inference"),
        NodeGroup::new("trn2.48xlarge", 1).named("trn2-serving"),
    ];
    let f = Fleet::with_groups("samples", &groups).await;
    let s = &f.scenario;
    let own = Own { id: &s.id };
    // The node groups as EKS labels them.
    for group in &groups {
        for index in 0..group.count {
            let value = format!("{}-{}", s.id, group.name);
            kubectl(&["label", "node", &f.node(&group.name, index), &format!("{NODE_GROUP}={value}")]);
        }
    }

    let configs = apply_samples(s, "config/samples").await;
    assert_eq!(configs.len(), 3, "config/samples has three configs");
    for name in &configs {
        let config = s.wait_ready(name).await;
        let status = config.status.unwrap();
        for condition in &status.conditions {
            assert_ne!(condition.reason, "Conflict", "{name}: {condition:?}");
        }
        assert!(status.templates.unwrap().count > 0, "{name} made no template");
    }

    // A fine-tuning pod, then the pretraining Job's two whole-node pods, all in the training pool.
    let training = format!("{}-ml-training", s.id);
    let in_pool = |node: &str, group: &str| assert_eq!(node_label(node, NODE_GROUP), format!("{}-{group}", s.id));
    // As docs/install-eks.md shows it: applied, then looked at with kubectl.
    let pod = serde_json::to_string(&own.workload(example("pod.yaml").remove(0))).unwrap();
    let applied = kubectl_with(&support::cluster::kubeconfig(), &["apply", "-f", "-"], Some(&pod));
    assert!(applied.as_ref().is_ok_and(|out| out.contains("pod/finetune created")), "{applied:?}");
    let node = bound(s, &training, "finetune").await;
    in_pool(&node, "trn2-training");
    assert!(kubectl(&["get", "pod", "finetune", "-n", &training, "-o", "wide"]).contains(&node));
    let claims = kubectl(&["get", "resourceclaims", "-n", &training]);
    assert!(claims.lines().any(|l| l.starts_with("finetune-neurons-") && l.contains("allocated")), "{claims}");
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(s.client.clone(), &training);
    // The Job's headless Service first: its pods' subdomain (their rendezvous names, docs/workloads.md).
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(s.client.clone(), &training);
    // Its shared claim: the local cluster has no storage provisioner (nor the volume binder), so the test makes the
    // volume the claim binds to (its class, size and access modes) and binds them as the binder would: a statically
    // provisioned shared file system.
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = Api::namespaced(s.client.clone(), &training);
    let volumes: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(s.client.clone());
    let mut volume_names = Vec::new();
    for object in example("training-job.yaml") {
        match object["kind"].as_str().unwrap() {
            "Service" => drop(apply(&services, &own.workload(object)).await),
            "PersistentVolumeClaim" => {
                let mut claim = own.workload(object);
                let name = format!("{}-{}", s.id, claim["metadata"]["name"].as_str().unwrap());
                claim["spec"]["volumeName"] = json!(name);
                claim["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
                let volume = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                    "spec": {"capacity": claim["spec"]["resources"]["requests"],
                        "accessModes": claim["spec"]["accessModes"],
                        "storageClassName": claim["spec"]["storageClassName"],
                        "hostPath": {"path": "/tmp/neuron-dra-samples"},
                        "claimRef": {"namespace": claim["metadata"]["namespace"], "name": claim["metadata"]["name"]}}});
                apply(&volumes, &volume).await;
                apply(&claims, &claim).await;
                volume_names.push(name);
            }
            _ => drop(apply(&jobs, &own.workload(object)).await),
        }
    }
    assert_eq!(volume_names.len(), 1, "the Job's shared claim");
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &training);
    let job_pods = eventually(support::scenario::TIMEOUT, "the Job's two pods", || async {
        let list = pods.list(&ListParams::default().labels("job-name=pretrain")).await.ok()?.items;
        (list.len() == 2).then(|| list.iter().map(|p| p.name_any()).collect::<Vec<_>>())
    })
    .await;
    let mut job_nodes = BTreeSet::new();
    for pod in &job_pods {
        let node = bound(s, &training, pod).await;
        in_pool(&node, "trn2-training");
        job_nodes.insert(node);
    }
    assert_eq!(job_nodes.len(), 2, "one whole node per pod: {job_nodes:?}");
    // The rendezvous names: the Service's endpoints carry each pod as <job>-<index>, so pretrain-0.pretrain resolves.
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> = Api::namespaced(s.client.clone(), &training);
    eventually(support::scenario::TIMEOUT, "the Job's pods behind its headless Service", || async {
        let list = slices.list(&ListParams::default().labels("kubernetes.io/service-name=pretrain")).await.ok()?;
        let hostnames: BTreeSet<String> =
            list.items.iter().flat_map(|s| s.endpoints.iter().filter_map(|e| e.hostname.clone())).collect();
        (hostnames == BTreeSet::from(["pretrain-0".to_string(), "pretrain-1".to_string()])).then_some(())
    })
    .await;

    // The disaggregated pair on the serving node.
    let serving = format!("{}-ml-serving", s.id);
    for pod in example("disaggregated.yaml") {
        create_pod(&s.client, &serving, &own.workload(pod)).await;
    }
    for name in ["serve-prefill", "serve-decode"] {
        in_pool(&bound(s, &serving, name).await, "trn2-serving");
    }

    // The LeaderWorkerSet: its CRD accepts it; its leader and worker, made as its controller and pod webhook make
    // them (the group label and the exclusive affinities), land on the two nodes of one UltraServer pair.
    let lws = own.workload(example("leaderworkerset.yaml").remove(0));
    let crd = support::tools::lws_crds().join("leaderworkerset.x-k8s.io_leaderworkersets.yaml");
    kubectl(&["apply", "--server-side", "--force-conflicts", "-f", crd.to_str().unwrap()]);
    // `kubectl wait` fails at once while the new CRD has no conditions yet.
    let established = || async {
        let args =
            ["wait", "--for=condition=Established", "--timeout=5s", "crd/leaderworkersets.leaderworkerset.x-k8s.io"];
        kubectl_with(&support::cluster::kubeconfig(), &args, None).ok().map(|_| ())
    };
    eventually(support::scenario::TIMEOUT, "LeaderWorkerSet's CRD established", established).await;
    let dry_run = kubectl_with(
        &support::cluster::kubeconfig(),
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&serde_json::to_string(&lws).unwrap()),
    );
    assert!(dry_run.as_ref().is_ok_and(|out| out.contains("created (server dry run)")), "{dry_run:?}");
    let topology = lws["metadata"]["annotations"][LWS_EXCLUSIVE].as_str().unwrap().to_string();
    let group_key = format!("{}-chat-us-0", s.id);
    for (role, template) in [("leader", "leaderTemplate"), ("worker", "workerTemplate")] {
        let mut spec = lws["spec"]["leaderWorkerTemplate"][template]["spec"].clone();
        spec["affinity"] = json!({
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": topology,
                "labelSelector": {"matchExpressions": [{"key": LWS_GROUP_KEY, "operator": "In", "values": [group_key]}]}}]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": topology,
                "labelSelector": {"matchExpressions": [{"key": LWS_GROUP_KEY, "operator": "Exists"},
                    {"key": LWS_GROUP_KEY, "operator": "NotIn", "values": [group_key]}]}}]},
        });
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("chat-us-0-{role}"), "labels": {LWS_GROUP_KEY: group_key}},
            "spec": spec});
        create_pod(&s.client, &serving, &pod).await;
    }
    let leader = bound(s, &serving, "chat-us-0-leader").await;
    let worker = bound(s, &serving, "chat-us-0-worker").await;
    in_pool(&leader, "trn2u-inference");
    assert_ne!(leader, worker, "each pod claims its own node's UltraServer entry");
    assert_eq!(node_label(&leader, &topology), node_label(&worker, &topology), "one UltraServer pair");

    jobs.delete("pretrain", &DeleteParams::background()).await.unwrap();
    claims.delete("pretrain-data", &DeleteParams::background()).await.unwrap();
    for name in &volume_names {
        volumes.delete(name, &DeleteParams::background()).await.unwrap();
    }
    for (namespace, name) in [
        (&training, "finetune"),
        (&serving, "serve-prefill"),
        (&serving, "serve-decode"),
        (&serving, "chat-us-0-leader"),
        (&serving, "chat-us-0-worker"),
    ] {
        s.delete_pod(namespace, name).await;
    }
    f.clear().await;
}

/// config/samples-kubernetes-1.37: on a server with DeviceTaintRules and extended resources served by DRA every
/// config is Ready with remediation and `devices.neuron.aws.com`; on an older one the config that asks for what the
/// server lacks says so (`Unsupported`, nothing applied) and the others are Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_1_37_samples_are_ready_where_the_server_has_what_they_need() {
    let s = Scenario::with_operator("samples137").await;
    let minor: u32 = s.client.apiserver_version().await.unwrap().minor.trim_end_matches('+').parse().unwrap();
    let configs = apply_samples(&s, "config/samples-kubernetes-1.37").await;
    assert_eq!(configs.len(), 3);
    for name in &configs {
        // extendedResourceName is GA from 1.37 on; remediation's rules are on in every local control plane.
        if name.ends_with("-disaggregated") && minor < 36 {
            let config = s.wait_condition(name, "ConfigValid", "False").await;
            let valid = config.status.unwrap().conditions.into_iter().find(|c| c.type_ == "ConfigValid").unwrap();
            assert_eq!(valid.reason, "Unsupported", "{name}: {valid:?}");
            assert!(valid.message.contains("extendedResourceName"), "{name}: {valid:?}");
            continue;
        }
        s.wait_ready(name).await;
    }
    if minor >= 36 {
        kubectl(&["get", "deviceclass", "devices.neuron.aws.com"]);
    }
    let training = s.configs().get(&format!("{}-training", s.id)).await.unwrap();
    assert!(training.spec.remediation.is_some(), "the overlay adds remediation to the training pool");
}
