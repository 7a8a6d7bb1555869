//! The workloads in examples/ follow docs/workloads.md, checked without a cluster: every container that uses a
//! claim is launched as wide as the claim is (`--nproc-per-node` or `--tensor-parallel-size` equal to the NeuronCores
//! the template gives, computed from the template the operator compiles from the samples), has CPU and memory
//! requests and a memory-backed /dev/shm, and the multi-node Job has a real rendezvous (a headless Service as its
//! pods' subdomain, torchrun's node rank from the completion index, the index-0 pod as master). tests/samples.rs
//! applies the same files on the local control plane and checks that the scheduler places every pod.

mod support {
    pub mod cluster;
    pub mod cores;
}

use std::collections::BTreeMap;

use neuron_dra_operator::cli::parse_config;
use neuron_dra_operator::logic::build::build;
use neuron_dra_operator::logic::validate::validate;
use serde_json::{Value, json};
use support::cluster::{documents, repo};
use support::cores::{check_pod, command_words};

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `(namespace, template) -> spec.spec.devices` of every template the samples `config/samples` applies compile to.
fn sample_templates() -> BTreeMap<(String, String), Value> {
    let kustomization: Value = serde_yaml::from_str(&read("samples/Kustomization")).unwrap();
    let mut templates = BTreeMap::new();
    for file in kustomization["resources"].as_array().unwrap() {
        let path = format!("samples/{}", file.as_str().unwrap());
        let config = parse_config(&read(&path)).unwrap_or_else(|e| panic!("{path}: {e:?}"));
        let validated = validate(&config).unwrap_or_else(|e| panic!("{path}: {e}"));
        let namespaces = validated.spec.templates.namespaces.clone();
        for template in build(&validated, &namespaces).templates {
            let key = (template.metadata.namespace.clone().unwrap(), template.metadata.name.clone().unwrap());
            templates.insert(key, serde_json::to_value(&template.spec.spec.devices).unwrap());
        }
    }
    templates
}

/// `(file, object, pod spec)` for every pod an example makes: a Pod, a Job's template, a LeaderWorkerSet's leader
/// and worker templates.
fn example_pods() -> Vec<(String, Value, Value)> {
    let mut pods = Vec::new();
    for entry in std::fs::read_dir(repo("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        for object in documents(&std::fs::read_to_string(&path).unwrap()) {
            let specs = match object["kind"].as_str().unwrap() {
                "Pod" => vec![object["spec"].clone()],
                "Job" => vec![object["spec"]["template"]["spec"].clone()],
                "LeaderWorkerSet" => ["leaderTemplate", "workerTemplate"]
                    .map(|t| object["spec"]["leaderWorkerTemplate"][t]["spec"].clone())
                    .to_vec(),
                _ => vec![],
            };
            pods.extend(specs.into_iter().map(|spec| (file.clone(), object.clone(), spec)));
        }
    }
    pods
}

#[test]
fn every_example_is_launched_as_wide_as_its_claim() {
    let templates = sample_templates();
    let mut checked = BTreeMap::<String, usize>::new();
    for (file, object, spec) in example_pods() {
        let namespace = object["metadata"]["namespace"].as_str().unwrap().to_string();
        let devices = |template: &str| templates.get(&(namespace.clone(), template.to_string())).cloned();
        let what = format!("examples/{file} ({})", object["metadata"]["name"]);
        *checked.entry(file).or_default() += check_pod(&what, &spec, &devices);
    }
    let files: Vec<&str> = checked.keys().map(String::as_str).collect();
    assert_eq!(files, ["disaggregated.yaml", "leaderworkerset.yaml", "pod.yaml", "training-job.yaml"]);
    assert!(checked.values().all(|n| *n >= 1), "an example whose containers use no claim: {checked:?}");
}

/// docs/workloads.md's table of NeuronCores per device, from the catalog.
#[test]
fn the_guide_s_core_table_is_the_catalog() {
    let guide = read("docs/workloads.md");
    for row in neuron_dra_operator::logic::catalog::TRAINIUM_TYPES {
        let Some(devices) = row.devices else { continue };
        let cell = |lnc| row.cores_per_device(lnc).to_string();
        let line = if row.lnc {
            format!("| {} | {devices} | {} | {} | {} |", row.name, row.physical_cores(), cell(Some(2)), cell(Some(1)))
        } else {
            format!("| {} | {devices} | {} | {} | - |", row.name, row.physical_cores(), cell(None))
        };
        assert!(guide.contains(&line), "docs/workloads.md lacks the row `{line}`");
    }
}

#[test]
fn every_example_pod_has_cpu_memory_and_shared_memory() {
    for (file, object, spec) in example_pods() {
        let what = format!("examples/{file} ({})", object["metadata"]["name"]);
        let shm: Vec<&Value> =
            spec["volumes"].as_array().into_iter().flatten().filter(|v| v["emptyDir"]["medium"] == "Memory").collect();
        assert_eq!(shm.len(), 1, "{what}: one memory-backed emptyDir for /dev/shm");
        for container in spec["containers"].as_array().unwrap() {
            let requests = &container["resources"]["requests"];
            assert!(requests["cpu"].is_string() && requests["memory"].is_string(), "{what}: CPU and memory requests");
            assert_eq!(
                container["resources"]["limits"]["memory"], requests["memory"],
                "{what}: memory limit = request"
            );
            let mounts = container["volumeMounts"].as_array().into_iter().flatten();
            assert!(
                mounts.into_iter().any(|m| m["mountPath"] == "/dev/shm" && m["name"] == shm[0]["name"]),
                "{what}: /dev/shm is not the memory-backed volume"
            );
        }
    }
}

/// The indexed Job's rendezvous: what torchrun needs to find its peers, and what Kubernetes gives it.
#[test]
fn the_training_job_has_a_real_rendezvous() {
    let objects = documents(&read("examples/training-job.yaml"));
    let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"));
    let (service, job) = (find("Service"), find("Job"));
    let name = job["metadata"]["name"].as_str().unwrap();
    let pod = &job["spec"]["template"]["spec"];
    // A headless Service named as the pods' subdomain gives each pod the name <job>-<index>.<service>.
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(pod["subdomain"], service["metadata"]["name"]);
    assert_eq!(service["spec"]["selector"], json!({"batch.kubernetes.io/job-name": name}));
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true, "peers resolve before they are Ready");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    let nodes = job["spec"]["completions"].as_u64().unwrap();
    assert_eq!(job["spec"]["parallelism"].as_u64(), Some(nodes), "every node at once, or the rendezvous waits");

    let train = &pod["containers"][0];
    let words = command_words(train);
    assert_eq!(words[0], "torchrun");
    let flag = |flag: &str| {
        let prefix = format!("{flag}=");
        words.iter().find_map(|w| w.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {flag}=: {words:?}"))
    };
    assert_eq!(flag("--nnodes"), nodes.to_string());
    assert_eq!(flag("--node-rank"), "$(JOB_COMPLETION_INDEX)", "the Job controller sets it per pod");
    let port = service["spec"]["ports"][0]["port"].as_u64().unwrap();
    assert_eq!(flag("--master-addr"), format!("{name}-0.{}", service["metadata"]["name"].as_str().unwrap()));
    assert_eq!(flag("--master-port"), port.to_string());
}
