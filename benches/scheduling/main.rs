//! `BENCH_ONLY=scheduling make bench`: pods bound per second by the real kube-scheduler of the local control plane,
//! per profile kind, beside a plain claim of the same device count and the template's bare twin (the same requests
//! without selectors or constraints) on the same simulated fleet and fill. Figures, not assertions; on a shared
//! 2-core machine only the ratios mean something.
//!
//! Method (issue #42): the fleet filled to (fill - the timed pods) by allocated claims (`occupy.rs`); with the
//! scheduler stopped, the timed pods and, by the resourceclaim controller, their claims; then the scheduler started
//! and timed from its first binding to its last. No operator runs: the templates come from the operator's compiler
//! (the library) in this process and are applied once, before any run, so the operator's CPU in the timed window
//! is zero by construction; the scheduler's CPU of the window is shown beside it.
//!
//! Knobs: BENCH_SCHED_FLEETS (node counts, default "250,1000"), BENCH_SCHED_FILLS (default "0.5,1"),
//! BENCH_SCHED_PODS (timed pods per run, at most; default 40), BENCH_SCHED_KINDS (comma-separated kind names, default
//! all: one,four,four-efa,eight,sixteen,whole,fallbacks,ultraserver). BENCH_SCHED_QUICK=1: 250 nodes, 50%, 40 pods,
//! kinds one,four,whole, for development. BENCH_SCHED_PROFILE=DIR: a CPU profile of the scheduler in every timed run
//! (`run.rs`; the control plane up with SCHEDULER_PROFILING=1).

mod kinds;
mod occupy;
mod run;
mod table;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use neuron_dra_operator::devtools::simulate::{self, fleet::FleetSpec};
use serde_json::json;

use kinds::{Kind, TRN2, TRN2U};
use table::{Row, Table};

/// What one invocation measures.
struct Matrix {
    fleets: Vec<usize>,
    fills: Vec<f64>,
    pods: usize,
    kinds: Vec<Kind>,
}

fn matrix() -> Matrix {
    let quick = std::env::var("BENCH_SCHED_QUICK").is_ok_and(|v| v == "1");
    let list = |key: &str, default: &str| -> Vec<String> {
        let value = std::env::var(key).unwrap_or_else(|_| default.to_string());
        value.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
    };
    let (fleets, fills, pods, kinds) = if quick {
        ("250", "0.5", "40", "one,four,whole")
    } else {
        ("250,1000", "0.5,1", "40", "one,four,four-efa,eight,sixteen,whole,fallbacks,ultraserver")
    };
    let wanted = list("BENCH_SCHED_KINDS", kinds);
    Matrix {
        fleets: list("BENCH_SCHED_FLEETS", fleets).iter().map(|n| n.parse().expect("BENCH_SCHED_FLEETS")).collect(),
        fills: list("BENCH_SCHED_FILLS", fills).iter().map(|f| f.parse().expect("BENCH_SCHED_FILLS")).collect(),
        pods: list("BENCH_SCHED_PODS", pods)[0].parse().expect("BENCH_SCHED_PODS"),
        kinds: kinds::all().into_iter().filter(|k| wanted.iter().any(|w| w == k.name)).collect(),
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` compatibility
    }
    let client = Client::try_default().await.expect("KUBECONFIG names the local control plane");
    let matrix = matrix();
    let started = std::time::Instant::now();
    setup(&client, &matrix.kinds).await;
    let mut table = Table::default();
    for &nodes in &matrix.fleets {
        for ultra in [false, true] {
            let kinds: Vec<&Kind> = matrix.kinds.iter().filter(|k| k.ultra == ultra).collect();
            if kinds.is_empty() {
                continue;
            }
            let spec = fleet_spec(nodes, if ultra { TRN2U } else { TRN2 });
            simulate::create_fleet(&client, &spec).await.expect("creating the simulated fleet");
            eprintln!(
                "bench: fleet {} of {nodes} ({} slices)",
                spec.instance_type,
                occupy::slices(&client, &spec.prefix).await
            );
            for &fill in &matrix.fills {
                fleet_runs(&client, &spec, &kinds, fill, matrix.pods, &mut table).await;
            }
            simulate::clear(&client, Some(&spec.prefix)).await.expect("clearing the fleet");
        }
    }
    table.print();
    eprintln!("bench: scheduling scenario took {:.0} s", started.elapsed().as_secs_f64());
}

fn fleet_spec(nodes: usize, instance_type: &str) -> FleetSpec {
    FleetSpec {
        prefix: format!("sched{}{nodes}", if instance_type == TRN2U { "u" } else { "" }),
        count: nodes,
        instance_type: instance_type.into(),
        dra_driver_version: simulate::fleet::DEFAULT_DRA_DRIVER_VERSION.into(),
        neuron_driver_version: simulate::fleet::DEFAULT_NEURON_DRIVER_VERSION.into(),
        kubelet_version: simulate::fleet::DEFAULT_KUBELET_VERSION.into(),
    }
}

/// Every kind on one fleet at one fill: kinds that fill alike share one occupancy and one plain run.
async fn fleet_runs(client: &Client, spec: &FleetSpec, kinds: &[&Kind], fill: f64, pods: usize, table: &mut Table) {
    let mut plains: Vec<((u32, bool), run::Figures)> = Vec::new();
    let mut ordered: Vec<&Kind> = kinds.to_vec();
    ordered.sort_by_key(|k| (k.devices, k.efa));
    for kind in ordered {
        let plan = occupy::plan(kind, spec.count, fill, pods);
        occupy::occupy(client, kind, spec, plan).await;
        let key = (kind.devices, kind.efa);
        let plain = match plains.iter().find(|(k, _)| *k == key) {
            Some((_, figures)) => *figures,
            None => {
                let figures =
                    run::timed(client, &kinds::plain_name(kind.devices), &spec.instance_type, plan.timed).await;
                plains.push((key, figures));
                figures
            }
        };
        let template = run::timed(client, kind.name, &spec.instance_type, plan.timed).await;
        let bare = run::timed(client, &kinds::bare_name(kind.name), &spec.instance_type, plan.timed).await;
        occupy::release(client).await;
        let row = Row { kind: kind.name, nodes: spec.count, fill, pods: plan.timed, template, plain, bare };
        eprintln!("bench: {}", row.line());
        table.rows.push(row);
    }
}

/// The namespaces, DeviceClasses and every template (the kinds', their bare twins and the plain ones), applied once
/// before any run.
async fn setup(client: &Client, kinds: &[Kind]) {
    let params = PatchParams::apply("bench-scheduling").force();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [run::NAMESPACE, occupy::NAMESPACE] {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        namespaces.patch(name, &params, &Patch::Apply(&ns)).await.expect("namespace");
    }
    let (classes, mut templates) = kinds::compiled(kinds, run::NAMESPACE);
    let bare: Vec<ResourceClaimTemplate> = templates.iter().map(kinds::bare).collect();
    templates.extend(bare);
    let classes_api: Api<DeviceClass> = Api::all(client.clone());
    for class in classes {
        classes_api.patch(&class.name_any(), &params, &Patch::Apply(&class)).await.expect("DeviceClass");
    }
    let mut sizes: Vec<u32> = kinds.iter().map(|k| k.devices).collect();
    sizes.sort_unstable();
    sizes.dedup();
    templates.extend(sizes.into_iter().map(|n| kinds::plain(n, run::NAMESPACE)));
    let templates_api: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), run::NAMESPACE);
    for template in templates {
        // Immutable spec: replace, so a run after a compiler change never times the previous shape.
        let _ = templates_api.delete(&template.name_any(), &Default::default()).await;
        templates_api.create(&Default::default(), &template).await.expect("template");
    }
}
