//! Helm as the tests run it (built from its Go module by `hack/tools.sh`): its own config, cache and data
//! directories, made once per test process (tests run Helm concurrently; none of these commands writes there),
//! against the local control plane when one is running (`lint` and `template` need none).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use super::cluster::repo;
use super::docs;
use super::tools::{self, Run, temp_dir};

pub fn helm(args: &[&str]) -> Run {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| temp_dir("helm-home"));
    let mut env: Vec<(&str, &Path)> =
        vec![("HELM_CACHE_HOME", home), ("HELM_CONFIG_HOME", home), ("HELM_DATA_HOME", home)];
    // The control plane's kubeconfig, as `cluster::kubeconfig` finds it.
    let kubeconfig =
        std::env::var_os("KUBECONFIG").map(PathBuf::from).unwrap_or_else(|| repo("target/controlplane/kubeconfig"));
    if kubeconfig.exists() {
        env.push(("KUBECONFIG", &kubeconfig));
    }
    tools::run(&tools::tool("helm"), args, &repo(""), &env)
}

/// A documented Helm command (tests/support/docs.rs) for this release and namespace, with `extra` arguments; its
/// output, or a panic naming the command.
pub fn helm_doc(command: &str, release: &str, namespace: &str, extra: &[&str]) -> String {
    let mut args = docs::helm_args(command, release, namespace);
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    helm(&args).ok(&format!("helm {}", args.join(" ")))
}
