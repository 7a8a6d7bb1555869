use std::process::ExitCode;

use clap::Parser;
use neuron_dra_operator::cli::{Cli, Command, render};
use neuron_dra_operator::crd::crd_yaml;

fn run(args: neuron_dra_operator::controller::RunArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(neuron_dra_operator::controller::run(args))
}

fn simulate(command: neuron_dra_operator::simulate::SimulateCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = kube::Client::try_default().await?;
        neuron_dra_operator::simulate::run(client, command).await
    })
}

fn bundle(root: &std::path::Path, output: &std::path::Path) -> anyhow::Result<()> {
    let files = neuron_dra_operator::bundle::generate(root)?;
    neuron_dra_operator::bundle::write(&files, output)?;
    for drift in neuron_dra_operator::bundle::check(&files, output)? {
        eprintln!("warning: {}/{drift}", output.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Simulate(command) => simulate(command),
        Command::Crd => {
            print!("{}", crd_yaml());
            Ok(())
        }
        Command::Render { file, namespaces } => render(&file, &namespaces).map(|yaml| print!("{yaml}")),
        Command::Bundle { output, root } => bundle(&root, &output),
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
