//! The workloads in examples/ follow docs/workloads.md, checked without a cluster: every container that uses a
//! claim is launched as wide as the claim is (`--nproc-per-node` or `--tensor-parallel-size` equal to the NeuronCores
//! the template gives, computed from the template the operator compiles from the samples), has CPU and memory
//! requests and a memory-backed /dev/shm, and the multi-node Job has a real rendezvous (a headless Service as its
//! pods' subdomain, torchrun's node rank from the completion index, the index-0 pod as master). Against the tables of
//! docs/workloads.md (from AWS's published examples): the EFA environment of every multi-node container, EFA and the
//! KV-cache transfer's environment on both disaggregated sides, the ports, the compile-cache and checkpoint volumes;
//! and every sample template keeps one LNC across its fallbacks. tests/samples.rs applies the same files on the local
//! control plane and checks that the scheduler places every pod; tests/real_node_workloads.rs runs pod.yaml's launch
//! line on the real node.

mod support {
    pub mod cluster;
    pub mod cores;
}

use std::collections::BTreeMap;

use neuron_dra_operator::cli::parse_config;
use neuron_dra_operator::logic::desired::build;
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

/// The rows of the first table under `heading` in docs/workloads.md: each cell with its backticks, as written.
fn guide_table(heading: &str) -> Vec<Vec<String>> {
    let guide = read("docs/workloads.md");
    let start = guide.find(&format!("{heading}\n")).unwrap_or_else(|| panic!("docs/workloads.md lacks {heading}"));
    let section = guide[start + heading.len()..].split("\n#").next().unwrap();
    let rows = section.lines().filter(|l| l.starts_with("| `"));
    rows.map(|l| l.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect()).collect()
}

/// The backticked words of a cell: `` `5559` (prefill), `5659` (decode) `` gives 5559 and 5659.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// A container's environment as written (`value` only).
fn env(container: &Value) -> BTreeMap<String, String> {
    let vars = container["env"].as_array().into_iter().flatten();
    vars.filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string()))).collect()
}

/// Whether a pod spec's claims come from templates with an EFA request (their devices, from the samples).
fn claims_efa(namespace: &str, spec: &Value, templates: &BTreeMap<(String, String), Value>) -> bool {
    let claims = spec["resourceClaims"].as_array().into_iter().flatten();
    let names = claims.filter_map(|c| c["resourceClaimTemplateName"].as_str());
    names.into_iter().any(|t| {
        let devices = &templates[&(namespace.to_string(), t.to_string())];
        let requests = devices["requests"].as_array().into_iter().flatten();
        requests.into_iter().any(|r| r["exactly"]["deviceClassName"].as_str().is_some_and(|c| c.starts_with("efa.")))
    })
}

/// docs/workloads.md's EFA environment, from AWS's multi-node example, is what every `torchrun` container on an EFA
/// template sets; a container without EFA sets none of it (libfabric would look for interfaces it does not have).
#[test]
fn every_multi_node_container_sets_the_documented_efa_environment() {
    let documented: BTreeMap<String, String> = guide_table("### The environment of a multi-node job")
        .iter()
        .map(|r| (ticked(&r[0])[0].clone(), ticked(&r[1])[0].clone()))
        .collect();
    assert_eq!(
        documented.keys().map(String::as_str).collect::<Vec<_>>(),
        ["CCOM_SOCKET_IFNAME", "FI_EFA_FORK_SAFE", "FI_EFA_USE_DEVICE_RDMA", "FI_PROVIDER"]
    );
    let templates = sample_templates();
    let mut checked = 0;
    for (file, object, spec) in example_pods() {
        let namespace = object["metadata"]["namespace"].as_str().unwrap();
        let efa = claims_efa(namespace, &spec, &templates);
        for container in spec["containers"].as_array().unwrap() {
            let (set, torchrun) = (env(container), command_words(container).contains(&"torchrun"));
            let what = format!("examples/{file} ({})", container["name"]);
            if efa && torchrun {
                for (name, value) in &documented {
                    assert_eq!(set.get(name), Some(value), "{what}: {name}");
                }
                checked += 1;
            } else if !efa {
                assert!(documented.keys().all(|name| !set.contains_key(name)), "{what}: EFA variables without EFA");
            }
        }
    }
    assert_eq!(checked, 1, "the training Job's container");
}

/// Both sides of the disaggregated example claim EFA and set the documented KV-cache transfer environment, each at
/// its own side-channel port, which it declares.
#[test]
fn both_disaggregated_sides_move_the_kv_cache_over_efa() {
    let rows = guide_table("### Disaggregated serving over EFA");
    let templates = sample_templates();
    let pods: Vec<_> = example_pods().into_iter().filter(|(file, ..)| file == "disaggregated.yaml").collect();
    assert_eq!(pods.len(), 2);
    for (_, object, spec) in pods {
        let what = object["metadata"]["name"].to_string();
        assert!(claims_efa("ml-serving", &spec, &templates), "{what}: its template has no EFA request");
        let container = &spec["containers"][0];
        let set = env(container);
        for row in &rows {
            let (name, values) = (ticked(&row[0])[0].clone(), ticked(&row[1]));
            let value = set.get(&name).unwrap_or_else(|| panic!("{what}: no {name}"));
            assert!(values.contains(value), "{what}: {name}={value}, documented {values:?}");
        }
        let port: u64 = set["VLLM_NIXL_SIDE_CHANNEL_PORT"].parse().unwrap();
        let ports = container["ports"].as_array().unwrap();
        assert!(ports.iter().any(|p| p["containerPort"] == port), "{what}: side channel {port} not declared");
    }
}

/// Every port an example declares is in docs/workloads.md's table of ports, and every row is declared.
#[test]
fn the_examples_ports_are_the_documented_ones() {
    let mut documented = BTreeMap::<String, Vec<u64>>::new();
    for row in guide_table("### Ports") {
        let file = ticked(&row[0])[0].trim_start_matches("examples/").to_string();
        documented.entry(file).or_default().extend(ticked(&row[1]).iter().map(|p| p.parse::<u64>().unwrap()));
    }
    let mut declared = BTreeMap::<String, Vec<u64>>::new();
    for (file, _, spec) in example_pods() {
        let containers = spec["containers"].as_array().unwrap().iter();
        let ports = containers.flat_map(|c| c["ports"].as_array().into_iter().flatten());
        declared.entry(file).or_default().extend(ports.map(|p| p["containerPort"].as_u64().unwrap()));
    }
    for ports in documented.values_mut().chain(declared.values_mut()) {
        ports.sort();
        ports.dedup();
    }
    declared.retain(|_, ports| !ports.is_empty());
    assert_eq!(declared, documented);
}

/// The compile cache and the checkpoints outlive the container where AWS's examples keep them so: the training Job
/// on its shared claim at /data (cache and output), the serving pods on a node-local volume at /cache.
#[test]
fn the_compile_cache_and_checkpoints_are_on_volumes() {
    let objects = documents(&read("examples/training-job.yaml"));
    let claim = objects.iter().find(|o| o["kind"] == "PersistentVolumeClaim").expect("a shared claim");
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteMany"]), "both nodes mount it");
    let job = objects.iter().find(|o| o["kind"] == "Job").unwrap();
    let pod = &job["spec"]["template"]["spec"];
    let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["persistentVolumeClaim"].is_object()).unwrap();
    assert_eq!(volume["persistentVolumeClaim"]["claimName"], claim["metadata"]["name"]);
    let train = &pod["containers"][0];
    let mount = |name: &Value| {
        let mounts = train["volumeMounts"].as_array().unwrap();
        mounts.iter().find(|m| &m["name"] == name).map(|m| m["mountPath"].as_str().unwrap().to_string())
    };
    let data = mount(&volume["name"]).expect("the claim is mounted");
    assert!(env(train)["NEURON_CC_FLAGS"].contains(&format!("--cache_dir={data}/")), "the compile cache on it");
    assert!(command_words(train).iter().any(|w| w.contains(&format!("={data}/"))), "the output on it");
    for (file, object, spec) in example_pods() {
        if file != "disaggregated.yaml" {
            continue;
        }
        let container = &spec["containers"][0];
        let cache = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "cache").expect("a cache volume");
        assert!(cache["emptyDir"]["sizeLimit"].is_string(), "{}: a bounded cache", object["metadata"]["name"]);
        let mounts = container["volumeMounts"].as_array().unwrap();
        let path = mounts.iter().find(|m| m["name"] == "cache").unwrap()["mountPath"].as_str().unwrap();
        assert!(env(container)["VLLM_CACHE_ROOT"].starts_with(path));
    }
}

/// Every template the samples make keeps one Logical NeuronCore setting across its alternatives (the validation
/// refuses a fallback that changes it unless marked, and no sample marks one).
#[test]
fn every_sample_template_keeps_its_lnc_across_fallbacks() {
    for ((namespace, name), devices) in sample_templates() {
        let requests = devices["requests"].as_array().unwrap();
        let neurons = requests.iter().find(|r| r["name"] == "neurons").unwrap();
        let alternatives: Vec<String> = match neurons["firstAvailable"].as_array() {
            Some(subs) => subs.iter().map(|s| format!("neurons/{}", s["name"].as_str().unwrap())).collect(),
            None => vec!["neurons".to_string()],
        };
        let lnc = |request: &String| {
            let configs = devices["config"].as_array().into_iter().flatten();
            let mut found = configs.filter(|c| c["requests"].as_array().unwrap().iter().any(|r| r == request));
            found.find_map(|c| c["opaque"]["parameters"]["logicalNeuronCore"].as_u64())
        };
        let settings: std::collections::BTreeSet<Option<u64>> = alternatives.iter().map(lnc).collect();
        assert_eq!(settings.len(), 1, "{namespace}/{name}: its alternatives run at {settings:?}");
    }
}
