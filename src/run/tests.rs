use clap::Parser;

use super::*;
use crate::cli::{Cli, Command};

fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
    let argv = ["neuron-dra-operator", "run"].iter().chain(args);
    match Cli::try_parse_from(argv)?.command {
        Command::Run(args) => Ok(*args),
        other => panic!("not run: {other:?}"),
    }
}

#[test]
fn kube_style_names_and_the_first_names_mean_the_same() {
    let new = parse(&["--metrics-bind-address=127.0.0.1:9443", "--health-probe-bind-address", "127.0.0.1:9081"]);
    let old = parse(&["--metrics-addr", "127.0.0.1:9443", "--probe-addr=127.0.0.1:9081"]);
    for args in [new.unwrap(), old.unwrap()] {
        assert_eq!(args.metrics_bind_address, "127.0.0.1:9443".parse().unwrap());
        assert_eq!(args.health_probe_bind_address, "127.0.0.1:9081".parse().unwrap());
    }
    let help = Cli::try_parse_from(["neuron-dra-operator", "run", "--help"]).unwrap_err().to_string();
    assert!(help.contains("--metrics-bind-address") && !help.contains("--metrics-addr"), "{help}");
    assert!(!help.contains("--log-json"), "the first spelling is hidden: {help}");
}

#[test]
fn leader_elect_is_a_switch_that_still_takes_a_value() {
    let leader_elect = |args: &[&str]| parse(args).unwrap().leader_elect;
    assert!(leader_elect(&[]), "on by default");
    assert!(leader_elect(&["--leader-elect"]));
    assert!(leader_elect(&["--leader-elect", "--concurrency=2"]));
    assert!(leader_elect(&["--leader-elect=true"]));
    assert!(!leader_elect(&["--leader-elect=false"]));
    assert!(!leader_elect(&["--leader-elect", "false"]));
    assert!(!parse(&["--metrics-secure=false"]).unwrap().metrics_secure);
    assert!(parse(&["--metrics-secure"]).unwrap().metrics_secure);
}

#[test]
fn lease_durations_are_written_like_kubes_and_bare_seconds_still_work() {
    let lease = |args: &[&str]| parse(args).map(|a| a.lease_duration);
    assert_eq!(lease(&[]).unwrap(), Duration::from_secs(15));
    assert_eq!(lease(&["--lease-duration", "1m30s"]).unwrap(), Duration::from_secs(90));
    assert_eq!(lease(&["--lease-duration=20s"]).unwrap(), Duration::from_secs(20));
    assert_eq!(lease(&["--lease-duration", "6"]).unwrap(), Duration::from_secs(6));
    for (bad, reason) in [
        ("1500ms", "is not a whole number of seconds"),
        ("2s", "is shorter than 3s"),
        ("soon", "is not a duration like 15s or 1m30s"),
    ] {
        let error = lease(&["--lease-duration", bad]).unwrap_err().to_string();
        let first = error.lines().next().unwrap();
        assert!(first.contains("--lease-duration") && first.contains(reason), "{bad}: {error}");
    }
}

#[test]
fn the_log_format_is_json_or_text_and_log_json_still_means_json() {
    assert!(!parse(&[]).unwrap().json_logs());
    assert!(parse(&["--log-format", "json"]).unwrap().json_logs());
    assert!(!parse(&["--log-format=text"]).unwrap().json_logs());
    assert!(parse(&["--log-json"]).unwrap().json_logs());
    assert!(parse(&["--log-format=yaml"]).unwrap_err().to_string().contains("possible values: json, text"));
    assert!(parse(&["--log-json", "--log-format=text"]).is_err(), "contradicting spellings");
}

#[test]
fn kubeconfig_and_context_are_taken() {
    let args = parse(&["--kubeconfig", "/etc/kube/config", "--context", "prod"]).unwrap();
    assert_eq!(args.connection().kubeconfig, Some(PathBuf::from("/etc/kube/config")));
    assert_eq!(args.connection().context.as_deref(), Some("prod"));
}

/// kube-scheduler's leader-election names and klog's `-v` mean what their Kubernetes counterparts mean.
#[test]
fn kube_leader_election_names_and_klog_verbosity_are_accepted() {
    let kube = parse(&[
        "--leader-elect-lease-duration=30s",
        "--leader-elect-resource-name",
        "ndo",
        "--leader-elect-resource-namespace=ops",
    ])
    .unwrap();
    let ours = parse(&["--lease-duration", "30s", "--lease-name=ndo", "--lease-namespace", "ops"]).unwrap();
    for args in [kube, ours] {
        assert_eq!((args.lease_duration, args.lease_name.as_str()), (Duration::from_secs(30), "ndo"));
        assert_eq!(args.lease_namespace, "ops");
    }
    assert!(parse(&["--leader-elect-lease-duration=1s"]).is_err(), "the same checks");

    let filter = |args: &[&str]| parse(args).unwrap().log_filter();
    assert_eq!(filter(&[]), None, "RUST_LOG, else info");
    assert_eq!(filter(&["-v", "0"]).as_deref(), Some("info,kube_lease_manager=warn"));
    let debug = Some("info,kube_lease_manager=warn,neuron_dra_operator=debug");
    assert_eq!(filter(&["-v=2"]).as_deref(), debug);
    assert_eq!(filter(&["-v4"]).as_deref(), debug);
    assert_eq!(filter(&["--v=4"]).as_deref(), debug);
    assert_eq!(filter(&["-v", "6"]).as_deref(), Some("debug,neuron_dra_operator=trace"));
    assert_eq!(filter(&["--log-level=warn"]).as_deref(), Some("warn"));
    assert!(parse(&["-v", "2", "--log-level", "debug"]).is_err(), "one or the other");
    assert!(parse(&["-v", "high"]).is_err());
    // Each filter is one tracing accepts.
    for level in [0, 3, 9] {
        let directives = filter(&["-v", &level.to_string()]).unwrap();
        tracing_subscriber::EnvFilter::try_new(&directives).unwrap();
    }
}
