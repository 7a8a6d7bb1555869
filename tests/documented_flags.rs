//! Every operator flag and environment variable the repository shows a user is run through the operator's own
//! argument parser, not only rendered: the command lines and flags in README.md, CONTRIBUTING.md and docs/, the
//! `extraArgs` and `extraEnv` examples of the chart's values.yaml, and the arguments and environment of each install
//! path (config/manager, the OLM bundle, the chart rendered by Helm with its defaults and with every value that
//! changes an argument). An example the binary refuses would crash-loop the operator of whoever copies it.

mod support {
    pub mod cluster;
    pub mod tools;
}

use std::collections::BTreeMap;
use std::path::Path;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use neuron_dra_operator::cli::Cli;
use serde_json::Value;
use support::cluster::{documents, repo};
use support::tools::{run, temp_dir, tool};

/// Flags of other programs that the docs show on their own in backticks (a span that starts with `--`), with their
/// program. A flag not listed here must be the operator's: add another program's flag here with its program.
const FOREIGN_FLAGS: &[(&str, &str)] = &[
    ("--all", "skopeo copy"),
    ("--authorization-mode", "kube-apiserver"),
    ("--build-arg", "buildah, docker build"),
    ("--cloud-provider-hint", "the EFA driver"),
    ("--create-namespace", "helm install"),
    ("--default-not-ready-toleration-seconds", "kube-apiserver"),
    ("--default-unreachable-toleration-seconds", "kube-apiserver"),
    ("--enable-admission-plugins", "kube-apiserver"),
    ("--feature-gates", "Kubernetes components"),
    ("--field-selector", "kubectl"),
    ("--filter", "the EFA driver"),
    ("--ignored", "cargo test"),
    ("--kubelet-certificate-authority", "kube-apiserver"),
    ("--node-monitor-grace-period", "kube-controller-manager"),
    ("--node-monitor-period", "kube-controller-manager"),
    ("--kubelet-client-certificate", "kube-apiserver"),
    ("--kubelet-client-key", "kube-apiserver"),
    ("--kubelet-preferred-address-types", "kube-apiserver"),
    ("--logical-nc-config", "neuronx-cc"),
    ("--master-port", "torchrun"),
    ("--nproc-per-node", "torchrun"),
    ("--prefix", "the stand-in plugin's image build"),
    ("--profiling", "kube-scheduler"),
    ("--reset-then-reuse-values", "helm upgrade"),
    ("--reuse-values", "helm upgrade"),
    ("--set", "helm"),
    ("--set-file", "helm"),
    ("--take-ownership", "helm upgrade"),
    ("--tensor-parallel-size", "vLLM"),
];

/// Environment variables the operator reads other than through a flag.
const OTHER_ENV: &[&str] = &["RUST_LOG", "KUBECONFIG"];

/// Parses `neuron-dra-operator ARGS...` as the binary does; `--help` and `--version` count as parsed.
fn parse(args: &[&str]) -> Result<(), String> {
    parse_allowing(args, &[])
}

/// As `parse`, with some kinds of error allowed too.
fn parse_allowing(args: &[&str], allowed: &[ErrorKind]) -> Result<(), String> {
    match Cli::try_parse_from(std::iter::once("neuron-dra-operator").chain(args.iter().copied())) {
        Ok(_) => Ok(()),
        Err(e) if [ErrorKind::DisplayHelp, ErrorKind::DisplayVersion].contains(&e.kind()) => Ok(()),
        Err(e) if allowed.contains(&e.kind()) => Ok(()),
        Err(e) => Err(e.to_string().lines().next().unwrap_or_default().to_string()),
    }
}

/// Every long flag of every subcommand, hidden aliases included: name -> (subcommand, complete when shown bare). A
/// flag is complete bare when it takes no value (`--kueue`) or its value may be left out (`--leader-elect`, which
/// means `--leader-elect=true`); one whose value is required (`--metrics-cert-dir`) is not.
fn operator_flags() -> BTreeMap<String, Vec<(String, bool)>> {
    let mut flags: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    let mut cli = Cli::command();
    cli.build(); // fills in each argument's number of values (before, `num_args` is unset unless given)
    for sub in cli.get_subcommands() {
        for arg in sub.get_arguments() {
            let optional_value = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
            let complete_bare = !arg.get_action().takes_values() || optional_value;
            let names = arg.get_long().into_iter().chain(arg.get_all_aliases().unwrap_or_default());
            for name in names {
                flags.entry(format!("--{name}")).or_default().push((sub.get_name().to_string(), complete_bare));
            }
        }
    }
    for global in ["--help", "--version"] {
        flags.insert(global.into(), vec![(String::new(), true)]);
    }
    flags
}

/// The environment variables the flags read, with the flag each sets.
fn flag_env() -> BTreeMap<String, String> {
    let run = Cli::command().find_subcommand("run").unwrap().clone();
    let envs =
        run.get_arguments().filter_map(|a| Some((a.get_env()?.to_str()?.to_string(), a.get_long()?.to_string())));
    envs.collect()
}

/// A piece of code in Markdown: an inline span, or a line of a fenced block (with its `\` continuations joined).
struct Snippet {
    line: usize,
    text: String,
    inline: bool,
}

/// Every inline code span and fenced line of a Markdown file.
fn snippets(text: &str) -> Vec<Snippet> {
    let mut found: Vec<Snippet> = Vec::new();
    let (mut fenced, mut continued) = (false, false);
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            (fenced, continued) = (!fenced, false);
        } else if fenced {
            let text = line.trim_end().trim_end_matches('\\').to_string();
            match found.last_mut() {
                Some(last) if continued => last.text = format!("{} {}", last.text, text.trim()),
                _ => found.push(Snippet { line: number + 1, text, inline: false }),
            }
            continued = line.trim_end().ends_with('\\');
        } else {
            let spans = line.split('`').skip(1).step_by(2);
            found.extend(spans.map(|span| Snippet { line: number + 1, text: span.to_string(), inline: true }));
        }
    }
    found
}

/// A snippet that runs the operator: `neuron-dra-operator SUBCOMMAND ...` (after `$ ` or environment assignments),
/// without its comment, redirection or pipe.
fn command_line(snippet: &str) -> Option<Vec<String>> {
    let snippet = snippet.split([' ', '\t']).take_while(|w| !["#", "|", ">", "<", "&&", ";", "2>"].contains(w));
    let snippet = snippet.collect::<Vec<_>>().join(" ");
    let snippet = snippet.trim().trim_start_matches("$ ");
    let words: Vec<&str> = snippet.split_whitespace().skip_while(|w| w.contains('=') && !w.starts_with('-')).collect();
    let subcommands = ["run", "render", "crd", "smoke-test"];
    (words.first() == Some(&"neuron-dra-operator") && words.get(1).is_some_and(|w| subcommands.contains(w)))
        .then(|| words[1..].iter().map(|w| w.to_string()).collect())
}

/// A usage line (`render -f CONFIG [--namespace NS]... [--kueue]`) as the command lines it stands for: the words
/// outside brackets, with each bracketed group alone.
fn usages(words: &[String]) -> Vec<Vec<String>> {
    let (mut required, mut groups, mut group): (Vec<String>, Vec<Vec<String>>, Option<Vec<String>>) =
        (Vec::new(), Vec::new(), None);
    for word in words {
        let word = word.trim_end_matches("...");
        if let Some(inner) = word.strip_prefix('[') {
            group = Some(Vec::new());
            if let Some(inner) = inner.strip_suffix(']') {
                groups.push(vec![inner.to_string()]);
                group = None;
            } else {
                group.as_mut().unwrap().push(inner.to_string());
            }
        } else if let Some(open) = group.as_mut() {
            open.push(word.trim_end_matches(']').to_string());
            if word.ends_with(']') {
                groups.push(group.take().unwrap());
            }
        } else {
            required.push(word.to_string());
        }
    }
    let mut lines = vec![required.clone()];
    lines.extend(groups.into_iter().map(|g| [required.clone(), g].concat()));
    lines
}

/// What is wrong with one snippet, if it shows the operator a command line or a flag it refuses. A flag alone is
/// checked in an inline span: a fenced line that starts with one continues another program's command.
fn check_snippet(snippet: &str, flags: &BTreeMap<String, Vec<(String, bool)>>) -> Option<String> {
    if let Some(words) = command_line(snippet) {
        let refused = usages(&words).into_iter().find_map(|line| {
            let args: Vec<&str> = line.iter().map(String::as_str).collect();
            parse(&args).err().map(|e| format!("`neuron-dra-operator {}`: {e}", args.join(" ")))
        });
        return refused;
    }
    let flag = snippet.trim();
    if !flag.starts_with("--") || flag.len() < 3 {
        return None;
    }
    let name = flag.split(['=', ' ']).next().unwrap();
    let Some(owners) = flags.get(name) else {
        return (!FOREIGN_FLAGS.iter().any(|(f, _)| *f == name)).then(|| {
            format!("`{flag}` is no flag of neuron-dra-operator (another program's? add it to FOREIGN_FLAGS)")
        });
    };
    let words: Vec<&str> = flag.split_whitespace().collect();
    let complete = flag.contains('=') || words.len() > 1 || owners.iter().any(|(_, complete_bare)| *complete_bare);
    if !complete {
        return None; // a flag named without the value it needs (`--metrics-cert-dir`): the name is the operator's
    }
    let errors: Vec<String> = owners
        .iter()
        .filter_map(|(sub, _)| {
            let mut args: Vec<&str> = vec![sub.as_str()];
            args.retain(|s| !s.is_empty());
            args.extend(&words);
            // A flag shown alone is checked alone: what else its subcommand requires (`render -f`) is not missing.
            parse_allowing(&args, &[ErrorKind::MissingRequiredArgument]).err()
        })
        .collect();
    (errors.len() == owners.len()).then(|| format!("`{flag}`: {}", errors.join("; ")))
}

#[test]
fn every_flag_and_command_line_the_docs_show_parses() {
    let flags = operator_flags();
    let mut files = vec![repo("README.md"), repo("CONTRIBUTING.md"), repo("charts/neuron-dra-operator/README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(repo("docs")).unwrap().map(|e| e.unwrap().path()).collect();
    docs.retain(|p| p.extension().is_some_and(|e| e == "md"));
    files.extend(docs);
    let (mut problems, mut checked) = (Vec::new(), 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for Snippet { line, text: snippet, inline } in snippets(&text) {
            if !inline && command_line(&snippet).is_none() {
                continue;
            }
            checked += usize::from(command_line(&snippet).is_some() || snippet.trim().starts_with("--"));
            if let Some(problem) = check_snippet(&snippet, &flags) {
                problems.push(format!("{}:{line}: {problem}", file.strip_prefix(repo(".")).unwrap().display()));
            }
        }
    }
    assert!(problems.is_empty(), "documented flags the operator refuses:\n{}", problems.join("\n"));
    assert!(checked > 20, "only {checked} flags and command lines found: is the scan still reading the docs?");
}

/// The checker itself: the example that crash-looped the chart's operator fails, its fix passes, and usage lines,
/// values and other programs' flags are told apart.
#[test]
fn the_checker_refuses_what_the_binary_refuses() {
    let flags = operator_flags();
    let problem = check_snippet("--max-concurrent-reconciles=2", &flags).unwrap();
    assert!(problem.contains("no flag of neuron-dra-operator"), "{problem}");
    for good in
        ["--concurrency=2", "--metrics-addr", "--leader-elect", "--log-format json", "--set", "--metrics-cert-dir"]
    {
        assert_eq!(check_snippet(good, &flags), None, "{good}");
    }
    assert!(check_snippet("--log-format=yaml", &flags).is_some());
    // A flag whose value may be left out is parsed when shown bare, one that needs its value is not: under a
    // subcommand that has neither, the first is refused and the second still passes as a name.
    for (flag, complete_bare) in [("--leader-elect", true), ("--metrics-secure", true), ("--metrics-cert-dir", false)] {
        assert_eq!(flags[flag], vec![("run".to_string(), complete_bare)], "{flag}");
        let elsewhere = BTreeMap::from([(flag.to_string(), vec![("crd".to_string(), complete_bare)])]);
        assert_eq!(check_snippet(flag, &elsewhere).is_some(), complete_bare, "{flag} checked bare");
    }
    assert!(check_snippet("--lease-duration=2", &flags).is_some(), "too short a lease");
    let usage = "neuron-dra-operator render -f CONFIG.yaml [--namespace NS]... [--kueue]";
    assert_eq!(check_snippet(usage, &flags), None);
    assert!(check_snippet("neuron-dra-operator render --kueue --namespace a -f x", &flags).is_some(), "conflicts");
    assert!(check_snippet("KUBECONFIG=k neuron-dra-operator run --probe-adr=:1  # typo", &flags).is_some());
    // A fenced command line continued with `\` is checked whole.
    let fenced =
        snippets("```sh\nneuron-dra-operator run \\\n  --lease-duration=1s\ncosign verify x \\\n  --key k\n```\n");
    assert_eq!(fenced.len(), 2, "two commands");
    assert!(check_snippet(&fenced[0].text, &flags).is_some(), "{}", fenced[0].text);
    assert!(command_line(&fenced[1].text).is_none(), "another program's command is not the operator's");
}

/// The `e.g.` example in the comment above a key of values.yaml, as YAML.
fn values_example(key: &str) -> serde_yaml::Value {
    let values = std::fs::read_to_string(repo("charts/neuron-dra-operator/values.yaml")).unwrap();
    let lines: Vec<&str> = values.lines().collect();
    let at = lines.iter().position(|l| l.starts_with(&format!("{key}:"))).unwrap();
    let comment: Vec<&str> =
        lines[..at].iter().rev().take_while(|l| l.starts_with('#')).map(|l| l.trim_start_matches('#').trim()).collect();
    let comment = comment.into_iter().rev().collect::<Vec<_>>().join(" ");
    let example = comment.split_once("e.g.").unwrap_or_else(|| panic!("no `e.g.` example above {key}")).1;
    let end = example.rfind(']').unwrap();
    serde_yaml::from_str(&example[..=end]).unwrap_or_else(|e| panic!("{key}'s example: {e}"))
}

/// Each environment variable is one the operator reads, with a value it takes.
fn check_env(env: &[Value], what: &str) {
    let flag_env = flag_env();
    for var in env {
        let name = var["name"].as_str().unwrap();
        let value = var["value"].as_str();
        if let Some(flag) = flag_env.get(name) {
            if let Some(value) = value {
                parse(&["run", &format!("--{flag}={value}")]).unwrap_or_else(|e| panic!("{what}: {name}={value}: {e}"));
            }
        } else {
            assert!(OTHER_ENV.contains(&name), "{what}: the operator reads no {name}");
            if let (Some(value), "RUST_LOG") = (value, name) {
                tracing_subscriber::EnvFilter::try_new(value)
                    .unwrap_or_else(|e| panic!("{what}: RUST_LOG={value}: {e}"));
            }
        }
    }
}

/// The operator container's arguments (after its command) and environment parse.
fn check_container(container: &Value, what: &str) {
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    parse(&args).unwrap_or_else(|e| panic!("{what}: {args:?}: {e}"));
    check_env(container["env"].as_array().map(Vec::as_slice).unwrap_or_default(), what);
}

#[test]
fn the_charts_examples_of_extra_args_and_env_parse() {
    let args = values_example("extraArgs");
    let args: Vec<&str> = args.as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(!args.is_empty());
    parse(&[&["run"][..], &args].concat()).unwrap_or_else(|e| panic!("values.yaml's extraArgs example {args:?}: {e}"));
    let env: Value = serde_json::to_value(values_example("extraEnv")).unwrap();
    assert!(!env.as_array().unwrap().is_empty());
    check_env(env.as_array().unwrap(), "values.yaml's extraEnv example");
}

fn operator_container(deployment_spec: &Value) -> &Value {
    &deployment_spec["template"]["spec"]["containers"][0]
}

#[test]
fn every_install_path_passes_arguments_and_environment_the_operator_takes() {
    let manager = documents(&std::fs::read_to_string(repo("config/manager/manager.yaml")).unwrap());
    let deployment = manager.iter().find(|o| o["kind"] == "Deployment").unwrap();
    check_container(operator_container(&deployment["spec"]), "config/manager/manager.yaml");

    let csv = repo("bundle/manifests/neuron-dra-operator.clusterserviceversion.yaml");
    let csv: Value = serde_yaml::from_str(&std::fs::read_to_string(csv).unwrap()).unwrap();
    let spec = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"];
    check_container(operator_container(spec), "the bundle's CSV");

    // The chart with its defaults, and with every value that changes an argument or the environment, including the
    // values.yaml examples of extraArgs and extraEnv.
    let dir = temp_dir("documented-values");
    let values = serde_json::json!({
        "leaderElection": {"enabled": false}, "replicas": 1, "logFormat": "text", "logLevel": "debug",
        "metrics": {"port": 9443, "certSecret": "metrics-tls"}, "probes": {"port": 9081},
        "extraArgs": values_example("extraArgs"), "extraEnv": values_example("extraEnv"),
    });
    std::fs::write(dir.join("values.yaml"), serde_json::to_string(&values).unwrap()).unwrap();
    let helm = tool("helm");
    for extra in [vec![], vec!["-f", dir.join("values.yaml").to_str().unwrap()]] {
        let mut args = vec!["template", "x", "charts/neuron-dra-operator", "--skip-tests"];
        args.extend(extra.iter().copied());
        let out = run(&helm, &args, Path::new(&repo(".")), &[]).ok("helm template");
        let deployment = documents(&out).into_iter().find(|o| o["kind"] == "Deployment").unwrap();
        let container = operator_container(&deployment["spec"]);
        check_container(container, &format!("the chart rendered with {extra:?}"));
        if !extra.is_empty() {
            let args = container["args"].to_string();
            for flag in ["--leader-elect=false", "--log-format=text", "--metrics-bind-address=0.0.0.0:9443"] {
                assert!(args.contains(flag), "{flag} in {args}");
            }
        }
    }
}
