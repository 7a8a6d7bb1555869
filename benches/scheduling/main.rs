//! `BENCH_ONLY=scheduling make bench`: pods bound per second by the real kube-scheduler of the local control plane,
//! per profile kind, beside a plain claim of the same device count and the template's bare twin (the same requests
//! without selectors or constraints) on the same simulated fleet and fill. Figures, not assertions; on a shared
//! 2-core machine only the ratios mean something.
//!
//! Method: the fleet filled by allocated claims (`occupy.rs`: a uniform share in units of the kind's size, or a busy
//! fill of single-device holds, a held EFA or a tainted device); with the scheduler stopped, the timed pods and, by
//! the resourceclaim controller, their claims; then the scheduler started and timed from its first binding to its
//! last (or the run's limit). Every cell (kind, fleet, device order, fill) runs BENCH_SCHED_PAIRS pairs of the
//! template and a plain claim of the same size on the same fill, the order within a pair alternating, and reports
//! medians. No operator runs: the templates come from the operator's compiler (the library) in this process, for the
//! server's version, and are applied once, before any run.
//!
//! Knobs: BENCH_SCHED_FLEETS (node counts, default "250"), BENCH_SCHED_FILLS (shares and busy fills, default
//! "0,1,held-all,held-half,held-efa,tainted"), BENCH_SCHED_PODS (timed pods per run, at most; default 120),
//! BENCH_SCHED_PAIRS (3), BENCH_SCHED_ORDERS ("driver", or "driver,reversed": every Neuron slice's devices listed in
//! reverse), BENCH_SCHED_RUN_SECONDS (a run's limit, 120), BENCH_SCHED_KINDS (comma-separated kind names, default
//! all: one,four,four-efa,eight,sixteen,whole,fallbacks,ultraserver). BENCH_SCHED_QUICK=1: kinds one,four,whole on
//! `held-all`, 40 pods, one pair, for development. BENCH_SCHED_PROFILE=DIR: a CPU profile of the scheduler in every
//! timed run (`run.rs`; the control plane up with SCHEDULER_PROFILING=1).

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
use neuron_dra_operator::logic::desired::Allocator;
use occupy::Fill;
use table::{Row, Table};

/// What one invocation measures.
struct Matrix {
    fleets: Vec<usize>,
    fills: Vec<Fill>,
    pods: usize,
    pairs: usize,
    reversed: Vec<bool>,
    kinds: Vec<Kind>,
}

fn matrix() -> Matrix {
    let quick = std::env::var("BENCH_SCHED_QUICK").is_ok_and(|v| v == "1");
    let list = |key: &str, default: &str| -> Vec<String> {
        let value = std::env::var(key).unwrap_or_else(|_| default.to_string());
        value.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
    };
    let (fleets, fills, pods, pairs, kinds) = if quick {
        ("250", "held-all", "40", "1", "one,four,whole")
    } else {
        (
            "250",
            "0,1,held-all,held-half,held-efa,tainted",
            "120",
            "3",
            "one,four,four-efa,eight,sixteen,whole,fallbacks,ultraserver",
        )
    };
    let wanted = list("BENCH_SCHED_KINDS", kinds);
    let order = |o: &String| match o.as_str() {
        "driver" => false,
        "reversed" => true,
        other => panic!("BENCH_SCHED_ORDERS: unknown order {other:?} (driver, reversed)"),
    };
    Matrix {
        fleets: list("BENCH_SCHED_FLEETS", fleets).iter().map(|n| n.parse().expect("BENCH_SCHED_FLEETS")).collect(),
        fills: list("BENCH_SCHED_FILLS", fills).iter().map(|f| Fill::parse(f)).collect(),
        pods: list("BENCH_SCHED_PODS", pods)[0].parse().expect("BENCH_SCHED_PODS"),
        pairs: list("BENCH_SCHED_PAIRS", pairs)[0].parse().expect("BENCH_SCHED_PAIRS"),
        reversed: list("BENCH_SCHED_ORDERS", "driver").iter().map(order).collect(),
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
    let version = client.apiserver_version().await.expect("the server's version").git_version;
    let allocator = Allocator::of_version(&version).unwrap_or_default();
    eprintln!("bench: Kubernetes {version}, templates compiled for {allocator:?}");
    setup(&client, &matrix.kinds, allocator).await;
    let mut table = Table { version, rows: Vec::new() };
    for &nodes in &matrix.fleets {
        for ultra in [false, true] {
            let kinds: Vec<&Kind> = matrix.kinds.iter().filter(|k| k.ultra == ultra).collect();
            if kinds.is_empty() {
                continue;
            }
            for &reversed in &matrix.reversed {
                let spec = fleet_spec(nodes, if ultra { TRN2U } else { TRN2 });
                simulate::create_fleet(&client, &spec).await.expect("creating the simulated fleet");
                if reversed {
                    occupy::reverse(&client, &spec).await;
                }
                eprintln!(
                    "bench: fleet {} of {nodes} ({} slices, {} order)",
                    spec.instance_type,
                    occupy::slices(&client, &spec.prefix).await,
                    if reversed { "reversed" } else { "driver" },
                );
                let cell = Cell { spec: &spec, reversed, pods: matrix.pods, pairs: matrix.pairs };
                for &fill in &matrix.fills {
                    fleet_runs(&client, &cell, &kinds, fill, &mut table).await;
                }
                simulate::clear(&client, Some(&spec.prefix)).await.expect("clearing the fleet");
            }
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

/// The fleet and method of the runs of one table block.
struct Cell<'a> {
    spec: &'a FleetSpec,
    reversed: bool,
    pods: usize,
    pairs: usize,
}

/// Every kind on one fleet at one fill: per kind, `pairs` pairs of the template and the plain claim of its size,
/// on the same fill, the order within a pair alternating (the later run of a pair finds the API server's caches
/// warmer), then one run of the template's bare twin.
async fn fleet_runs(client: &Client, cell: &Cell<'_>, kinds: &[&Kind], fill: Fill, table: &mut Table) {
    let spec = cell.spec;
    for kind in kinds.iter().filter(|k| fill.applies_to(k)) {
        let plan = occupy::plan(kind, spec.count, fill, cell.pods);
        occupy::occupy(client, kind, spec, plan).await;
        occupy::busy(client, spec, fill).await;
        let plain_name = kinds::plain_name(kind.devices);
        let (mut templates, mut plains) = (Vec::new(), Vec::new());
        for pair in 0..cell.pairs {
            let template_first = pair % 2 == 0;
            for template in [template_first, !template_first] {
                let name = if template { kind.name } else { plain_name.as_str() };
                let figures = run::timed(client, name, &spec.instance_type, plan.timed).await;
                if template { templates.push(figures) } else { plains.push(figures) }
            }
        }
        let bare = run::timed(client, &kinds::bare_name(kind.name), &spec.instance_type, plan.timed).await;
        occupy::unbusy(client, spec, fill).await;
        let row = Row {
            kind: kind.name,
            nodes: spec.count,
            reversed: cell.reversed,
            fill,
            pods: plan.timed,
            template: run::median(&templates),
            plain: run::median(&plains),
            bare,
        };
        eprintln!("bench: {}", row.line());
        table.rows.push(row);
    }
}

/// The namespaces, DeviceClasses and every template (the kinds', their bare twins and the plain ones), applied once
/// before any run.
async fn setup(client: &Client, kinds: &[Kind], allocator: Allocator) {
    let params = PatchParams::apply("bench-scheduling").force();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [run::NAMESPACE, occupy::NAMESPACE] {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        namespaces.patch(name, &params, &Patch::Apply(&ns)).await.expect("namespace");
    }
    let (classes, mut templates) = kinds::compiled(kinds, run::NAMESPACE, allocator);
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
