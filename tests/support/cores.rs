//! The NeuronCores a claim gives, computed from the ResourceClaimTemplate the operator's own compiler made (count or
//! `All`, `neuron_node` entries as the whole node, the instance type's cores per device at the template's LNC), and
//! the width a workload's container is launched with (`--nproc-per-node`, `--tensor-parallel-size`). Used by
//! tests/workloads.rs (examples/) and tests/readme.rs (the pods in README.md and docs/workloads.md).

#![allow(dead_code)]

use std::collections::BTreeSet;

use neuron_dra_operator::logic::catalog;
use neuron_dra_operator::logic::desired::{REQUEST_NEURONS, ULTRA_SERVER_NODES_PREFIX};
use serde_json::Value;

/// The flags that state how many NeuronCores a container's processes use.
pub const WIDTH_FLAGS: &[&str] = &["--nproc-per-node", "--tensor-parallel-size"];

/// The NeuronCores a claim from `template` (`spec.spec` of a ResourceClaimTemplate, as JSON) gives: one number per
/// alternative the scheduler may choose (one without `firstAvailable`).
pub fn template_cores(devices: &Value) -> BTreeSet<u32> {
    let neuron = devices["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == REQUEST_NEURONS)
        .expect("a Neuron request");
    let name = neuron["name"].as_str().unwrap();
    let alternatives: Vec<(String, &Value)> = match neuron["firstAvailable"].as_array() {
        Some(subrequests) => {
            subrequests.iter().map(|s| (format!("{name}/{}", s["name"].as_str().unwrap()), s)).collect()
        }
        None => vec![(name.to_string(), &neuron["exactly"])],
    };
    alternatives.iter().map(|(request, alternative)| alternative_cores(devices, request, alternative)).collect()
}

/// The selectors' CEL expressions of a request (or of a subrequest).
fn selectors(request: &Value) -> Vec<String> {
    let request = if request["exactly"].is_object() { &request["exactly"] } else { request };
    let expressions = request["selectors"].as_array().into_iter().flatten();
    expressions.filter_map(|s| s["cel"]["expression"].as_str().map(str::to_string)).collect()
}

/// `device.attributes['neuron.aws.com'].KEY == 'VALUE'` in a request's selectors.
fn pinned(request: &Value, key: &str) -> Option<String> {
    let prefix = format!(".{key} == '");
    selectors(request).iter().find_map(|s| Some(s.split_once(&prefix)?.1.trim_end_matches('\'').to_string()))
}

fn alternative_cores(devices: &Value, request: &str, alternative: &Value) -> u32 {
    let instance_type = pinned(alternative, "instanceType").expect("every Neuron request pins its instance type");
    let row = catalog::lookup(&instance_type).unwrap_or_else(|| panic!("{instance_type} is not in the catalog"));
    let whole_node = row.devices.expect("a type with a known device count");
    let class = alternative["deviceClassName"].as_str().unwrap_or_default();
    let count = match (class.starts_with(ULTRA_SERVER_NODES_PREFIX), alternative["allocationMode"].as_str()) {
        // An UltraServer node entry (of the node entries' class) stands for every device of its node.
        (true, _) => whole_node * alternative["count"].as_u64().unwrap_or(1) as u32,
        (_, Some("All")) => whole_node,
        _ => alternative["count"].as_u64().expect("an ExactCount request") as u32,
    };
    let configs = devices["config"].as_array().into_iter().flatten();
    let lnc = configs
        .filter(|c| c["requests"].as_array().is_some_and(|r| r.iter().any(|r| r == request)))
        .find_map(|c| c["opaque"]["parameters"]["logicalNeuronCore"].as_u64())
        .map(|l| l as u32);
    count * row.cores_per_device(lnc)
}

/// The container's command and arguments, word by word (a shell line in one argument is split too).
pub fn command_words(container: &Value) -> Vec<&str> {
    ["command", "args"]
        .iter()
        .flat_map(|field| container[field].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .flat_map(str::split_whitespace)
        .collect()
}

/// How wide a container is launched: a fixed number, or the NeuronCores counted at start from
/// `NEURON_RT_VISIBLE_CORES` (a shell variable as the flag's value, in a script that reads that variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Width {
    Fixed(u32),
    Counted(String),
}

/// The width flags a container states, with their values (`--flag=N` or `--flag N`, in `command` and `args`).
pub fn launch_width(container: &Value) -> Vec<(String, Width)> {
    let words = command_words(container);
    let counts = words.iter().any(|w| w.contains("NEURON_RT_VISIBLE_CORES"));
    let mut widths = Vec::new();
    for (i, word) in words.iter().enumerate() {
        for flag in WIDTH_FLAGS {
            let value = match word.strip_prefix(flag) {
                Some(rest) if rest.starts_with('=') => Some(&rest[1..]),
                Some("") => words.get(i + 1).copied(),
                _ => None,
            };
            let Some(value) = value else { continue };
            let width = match value.parse() {
                Ok(n) => Width::Fixed(n),
                Err(_) if counts && value.trim_matches('"').starts_with('$') => Width::Counted(value.to_string()),
                Err(_) => panic!("{flag} {value}: not a number, nor counted from NEURON_RT_VISIBLE_CORES"),
            };
            widths.push((flag.to_string(), width));
        }
    }
    widths
}

/// Checks every container of a pod spec that uses a claim from a template: it states one width, and that width is
/// the claim's NeuronCores: a fixed number where every alternative of the template gives the same, counted from
/// `NEURON_RT_VISIBLE_CORES` where they differ (a fixed one would be wrong for some). `template_devices` finds a
/// template's `spec.spec.devices` by name. Returns how many containers were checked.
pub fn check_pod(what: &str, spec: &Value, template_devices: &dyn Fn(&str) -> Option<Value>) -> usize {
    let mut checked = 0;
    for claim in spec["resourceClaims"].as_array().into_iter().flatten() {
        let Some(template) = claim["resourceClaimTemplateName"].as_str() else { continue };
        let devices = template_devices(template).unwrap_or_else(|| panic!("{what}: no template {template}"));
        let cores = template_cores(&devices);
        for container in spec["containers"].as_array().unwrap() {
            let uses = container["resources"]["claims"].as_array().into_iter().flatten();
            if !uses.clone().any(|u| u["name"] == claim["name"]) {
                continue;
            }
            let widths = launch_width(container);
            let name = &container["name"];
            assert_eq!(widths.len(), 1, "{what}: container {name} states {widths:?}, not one of {WIDTH_FLAGS:?}");
            let (flag, width) = &widths[0];
            match (cores.len(), width) {
                (1, Width::Fixed(n)) => {
                    let cores = *cores.first().unwrap();
                    assert_eq!(
                        *n, cores,
                        "{what}: container {name}: {flag} {n} but {template} gives {cores} NeuronCores"
                    )
                }
                (1, Width::Counted(_)) => {}
                (_, Width::Fixed(n)) => panic!(
                    "{what}: container {name}: {flag} {n}, but {template}'s alternatives give {cores:?} NeuronCores: \
                     count them from NEURON_RT_VISIBLE_CORES"
                ),
                (_, Width::Counted(_)) => {}
            }
            checked += 1;
        }
    }
    checked
}
