use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use neuron_dra_operator::cli::{Cli, Command, render, render_kueue, smoke_test};
use neuron_dra_operator::runtime::crd::crd_yaml;

fn run(args: neuron_dra_operator::run::RunArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(neuron_dra_operator::run::run(args))
}

fn main() -> ExitCode {
    // `--version` names the commit too, as build_info does; `-V` stays the bare version.
    let revision = neuron_dra_operator::runtime::telemetry::REVISION;
    let long_version: &'static str = format!("{} (revision {revision})", env!("CARGO_PKG_VERSION")).leak();
    let matches = Cli::command().long_version(long_version).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    let result = match cli.command {
        Command::Run(args) => run(*args),
        Command::Crd => {
            print!("{}", crd_yaml());
            Ok(())
        }
        Command::Render { file, kueue: true, .. } => render_kueue(&file).map(|(yaml, notes)| {
            notes.iter().for_each(|note| eprintln!("{note}"));
            print!("{yaml}")
        }),
        Command::Render { file, namespaces, kueue: false, kubernetes_version } => {
            render(&file, &namespaces, kubernetes_version.unwrap_or_default()).map(|yaml| print!("{yaml}"))
        }
        Command::SmokeTest { service, namespace } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(smoke_test(&service, namespace.as_deref())))
            .map(|report| println!("{report}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line per problem (RenderError's Display), or the error chain.
            eprintln!("{error:#}");
            ExitCode::FAILURE
        }
    }
}
