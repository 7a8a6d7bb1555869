//! What GitOps tools make of a config's status (docs/gitops.md), with their own code: kstatus itself
//! (sigs.k8s.io/cli-utils' `status.Compute`, built from its Go module by hack/tools.sh) and the Argo CD health
//! check `config/argocd/health.lua` run by Debian's `lua5.1` (Argo CD's gopher-lua is Lua 5.1), over statuses the
//! operator's own status code (`logic::status::compute`) made for a config that is Ready, rolling out, invalid,
//! halted, paused, sick but done, changed and not yet observed, and new (the CRD's default status). No cluster needed.

mod support {
    pub mod cluster;
    pub mod tools;
}

use std::path::Path;

use neuron_dra_operator::api::{DeviceSummary, DriverStatus, RolloutState, RolloutStatus};
use neuron_dra_operator::logic::status::{self, Health, Observation, Rollout, Validity};
use serde_json::{Value, json};
use support::cluster::repo;

/// A config that did everything: the plugin on 2 nodes, 4 templates in 2 namespaces.
fn done() -> Observation {
    Observation {
        templates_present: 4,
        templates_wanted: 4,
        template_namespaces: 2,
        ..Observation::bare(Some(3), false, Validity::Valid, rollout(2, 2, None))
    }
}

fn rollout(desired: i32, ready: i32, state: Option<RolloutState>) -> Rollout {
    let rollout = state.map(|state| RolloutStatus { state, ..RolloutStatus::default() });
    let status = DriverStatus {
        image: Some("public.ecr.aws/neuron/neuron-dra-driver:1.1.0".into()),
        desired_nodes: desired,
        ready_nodes: ready,
        updated_nodes: desired,
        rollout,
        ..DriverStatus::default()
    };
    Rollout::Applied { status, observed: true }
}

/// One case: a name, the config's `metadata.generation`, and its status (None: the operator has written none).
struct Case {
    name: &'static str,
    generation: i64,
    observation: Option<Observation>,
    kstatus: &'static str,
    argo: &'static str,
}

fn cases() -> Vec<Case> {
    let case = |name, observation: Observation, kstatus, argo| Case {
        name,
        generation: observation.generation.unwrap(),
        observation: Some(observation),
        kstatus,
        argo,
    };
    let mut rolling = done();
    rolling.rollout = rollout(2, 1, Some(RolloutState::Progressing));
    let mut invalid = done();
    invalid.validity =
        Validity::InvalidSpec("spec.profiles[0].training.devices: 32 is more than trn2.48xlarge has (16)".into());
    invalid.rollout = Rollout::NotApplied("the spec is invalid".into());
    let mut halted = done();
    halted.rollout = rollout(2, 1, Some(RolloutState::Halted));
    let mut paused = done();
    paused.paused = true;
    let mut sick = done();
    sick.health =
        Some(Health { summary: DeviceSummary { nodes: 2, total: 32, healthy: 31, unhealthy: 1 }, ..Health::default() });
    // The user changed the spec; the operator has not looked at it yet.
    let mut stale = case("stale", done(), "InProgress", "Progressing");
    stale.generation = 4;
    vec![
        case("ready", done(), "Current", "Healthy"),
        case("rolling", rolling, "InProgress", "Progressing"),
        case("invalid", invalid, "Failed", "Degraded"),
        case("halted", halted, "Failed", "Degraded"),
        case("paused", paused, "Current", "Suspended"),
        case("sick", sick, "Current", "Healthy"),
        stale,
        // Created, not yet seen by the operator: the API server returns the CRD's default status (see `object`).
        Case { name: "new", generation: 1, observation: None, kstatus: "InProgress", argo: "Progressing" },
    ]
}

/// The config as the API server would return it, with the status the operator's code computed.
fn object(case: &Case) -> Value {
    let mut object = json!({
        "apiVersion": "neurondra.io/v1alpha1",
        "kind": "NeuronDRAConfig",
        "metadata": {"name": case.name, "generation": case.generation},
        "spec": {"profiles": []},
    });
    object["status"] = match &case.observation {
        Some(observation) => serde_json::to_value(status::compute(None, observation, status::now())).unwrap(),
        None => crd_default_status(),
    };
    object
}

/// The status the CRD gives a config the operator has not written to (its schema's default): without it kstatus
/// would read a new config as Current, before anything happened.
fn crd_default_status() -> Value {
    let crd = serde_json::to_value(neuron_dra_operator::runtime::crd::crd()).unwrap();
    let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["default"];
    assert_eq!(*status, json!({"observedGeneration": 0}));
    status.clone()
}

#[test]
fn kstatus_reads_ready_as_current_work_as_in_progress_and_a_stall_as_failed() {
    let input: String = cases().iter().map(|c| format!("{}\n", object(c))).collect();
    let out = support::tools::kstatus(&input);
    let verdicts: Vec<(&str, &str)> =
        out.lines().map(|l| l.split_once(' ').unwrap()).map(|(o, rest)| (o, rest.split(' ').next().unwrap())).collect();
    let expected: Vec<(String, &str)> =
        cases().iter().map(|c| (format!("NeuronDRAConfig/{}", c.name), c.kstatus)).collect();
    let expected: Vec<(&str, &str)> = expected.iter().map(|(o, s)| (o.as_str(), *s)).collect();
    assert_eq!(verdicts, expected, "{out}");
    // The messages are the conditions' own.
    let line =
        |name: &str| out.lines().find(|l| l.starts_with(&format!("NeuronDRAConfig/{name} "))).unwrap().to_string();
    assert!(line("invalid").ends_with("32 is more than trn2.48xlarge has (16)"), "{out}");
    assert!(line("rolling").contains("2/2 nodes on 1.1.0, 1 ready"), "{out}");
    assert!(line("stale").contains("generation is 4, but latest observed generation is 3"), "{out}");
}

#[test]
fn the_argo_cd_health_check_reads_the_same_conditions() {
    for case in cases() {
        let (health, message) = argo_health(&object(&case));
        assert_eq!(health, case.argo, "{}: {message}", case.name);
        let expected = match case.name {
            "invalid" => "InvalidSpec: spec.profiles[0].training.devices: 32 is more than trn2.48xlarge has (16)",
            "halted" => "RolloutHalted",
            "rolling" => "RollingOut: 2/2 nodes on 1.1.0, 1 ready",
            "sick" => "every template is in place; 31 of 32 devices healthy on 2 nodes",
            "stale" => "waiting for the operator to observe generation 4",
            "new" => "waiting for the operator to observe generation 1",
            "paused" => "spec.paused",
            _ => "the driver is rolled out and every template is in place",
        };
        assert!(message.contains(expected), "{}: {message}", case.name);
    }
}

/// `(hs.status, hs.message)` of config/argocd/health.lua with `obj` bound to `object`, as Argo CD runs it.
fn argo_health(object: &Value) -> (String, String) {
    let script = repo("config/argocd/health.lua");
    let driver = format!(
        "obj = {}\nlocal hs = dofile({})\nio.write(hs.status, '\\n', hs.message)",
        lua(object),
        lua(&json!(script.to_str().unwrap()))
    );
    let out = lua51(&driver, "config/argocd/health.lua");
    let (status, message) = out.split_once('\n').unwrap_or((&out, ""));
    (status.to_string(), message.to_string())
}

/// What a Lua 5.1 chunk writes, run by Debian's `lua5.1` (the package of that name; .ci/run installs it).
fn lua51(chunk: &str, what: &str) -> String {
    let out = support::tools::run_with_input(Path::new("lua5.1"), &["-"], &repo("."), &[], Some(chunk));
    out.ok(&format!("lua5.1 (Debian's package lua5.1; .ci/run installs it) running {what}"))
}

/// A JSON value as a Lua table constructor (what Argo CD hands the script as `obj`).
fn lua(value: &Value) -> String {
    match value {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => lua_string(s),
        Value::Array(items) => format!("{{{}}}", items.iter().map(lua).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let fields: Vec<String> = map.iter().map(|(k, v)| format!("[{}] = {}", lua(&json!(k)), lua(v))).collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// A Lua 5.1 string literal: printable ASCII as it is, every other byte of the UTF-8 (and `"` and `\`) as a decimal
/// escape `\ddd`, always three digits so a digit after it is not read into it. Lua 5.1 has no `\u{...}` or `\x..`.
fn lua_string(text: &str) -> String {
    let mut literal = String::from("\"");
    for byte in text.bytes() {
        if (b' '..=b'~').contains(&byte) && byte != b'"' && byte != b'\\' {
            literal.push(char::from(byte));
        } else {
            literal.push_str(&format!("\\{byte:03}"));
        }
    }
    literal.push('"');
    literal
}

/// The encoder's strings read back byte for byte in Lua 5.1: quotes, backslashes, control characters, a digit after
/// an escape, and characters beyond ASCII.
#[test]
fn lua_strings_read_back_in_lua_5_1() {
    let text = "say \"hi\" \\ tab\there\n1\u{7}2 caf\u{e9} \u{1f600} 0";
    assert!(lua_string(text).is_ascii(), "{}", lua_string(text));
    let chunk = format!("io.write({})", lua_string(text));
    assert_eq!(lua51(&chunk, "the encoder's string"), text);
}

/// A condition without `message` (or `reason`): optional in a Condition as other writers (an older operator, a
/// hand edit, a mutating webhook) may leave them out. The check still gives a verdict, never a Lua error.
#[test]
fn the_argo_cd_health_check_reads_conditions_without_a_message() {
    let with = |conditions: Value| {
        json!({
            "apiVersion": "neurondra.io/v1alpha1", "kind": "NeuronDRAConfig",
            "metadata": {"name": "x", "generation": 2},
            "status": {"observedGeneration": 2, "conditions": conditions}
        })
    };
    let cases = [
        (json!([{"type": "Stalled", "status": "True", "reason": "RolloutHalted"}]), "Degraded", "RolloutHalted"),
        (json!([{"type": "Reconciling", "status": "True"}]), "Progressing", ""),
        (json!([{"type": "Ready", "status": "True"}]), "Healthy", ""),
        (
            json!([{"type": "Ready", "status": "True", "message": "in place"},
                   {"type": "DevicesHealthy", "status": "False", "reason": "DevicesUnhealthy"}]),
            "Healthy",
            "in place",
        ),
        (
            json!([{"status": "True"}, {"type": "Ready", "status": "False"}]),
            "Progressing",
            "Ready is not True: see the config's conditions",
        ),
    ];
    for (conditions, health, message) in cases {
        let (got, said) = argo_health(&with(conditions.clone()));
        assert_eq!((got.as_str(), said.as_str()), (health, message), "{conditions}");
    }
    // No metadata at all is no error either.
    let (got, _) = argo_health(&json!({"status": {"observedGeneration": 1, "conditions": []}}));
    assert_eq!(got, "Progressing");
}
