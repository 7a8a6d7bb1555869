//! `neuron-dra-devtools`: the tools that build and exercise the operator but never run in a cluster, kept out of
//! the operator image: a simulated Trainium fleet (tests, benchmarks, `make demo`), the OLM bundle generator
//! (`make bundle`) and the Helm chart's README (`make chart`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use neuron_dra_operator::devtools::{bundle, chart_readme, simulate};

#[derive(Parser, Debug)]
#[command(name = "neuron-dra-devtools", version, about = "Development tools of neuron-dra-operator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Publish a simulated Trainium fleet into a cluster (kubeconfig from KUBECONFIG).
    #[command(subcommand)]
    Simulate(simulate::SimulateCommand),
    /// Write the OLM bundle, generated from config/, crds/ and samples/ of a checkout.
    Bundle {
        /// Directory to write the bundle to.
        #[arg(long, default_value = "bundle")]
        output: PathBuf,
        /// The checkout to read config/, crds/ and samples/ from.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Write a Helm chart's README.md from its Chart.yaml and the comments of its values.yaml.
    ChartReadme {
        /// The chart's directory.
        #[arg(long, default_value = "charts/neuron-dra-operator")]
        chart: PathBuf,
    },
}

fn run_simulate(command: simulate::SimulateCommand) -> anyhow::Result<()> {
    if let simulate::SimulateCommand::Devices { instance_type, prefix, index } = &command {
        return simulate::print_devices(instance_type.as_deref(), prefix, *index);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = kube::Client::try_default().await?;
        simulate::run(client, command).await
    })
}

fn run_bundle(root: &Path, output: &Path) -> anyhow::Result<()> {
    let files = bundle::generate(root)?;
    bundle::write(&files, output)?;
    for drift in bundle::check(&files, output)? {
        eprintln!("warning: {}/{drift}", output.display());
    }
    Ok(())
}

fn run_chart_readme(chart: &Path) -> anyhow::Result<()> {
    let read = |file: &str| {
        std::fs::read_to_string(chart.join(file)).map_err(|e| anyhow::anyhow!("{}: {e}", chart.join(file).display()))
    };
    let readme = chart_readme::generate(&read("Chart.yaml")?, &read("values.yaml")?)?;
    std::fs::write(chart.join("README.md"), readme)?;
    Ok(())
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Simulate(command) => run_simulate(command),
        Command::Bundle { output, root } => run_bundle(&root, &output),
        Command::ChartReadme { chart } => run_chart_readme(&chart),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error:#}");
            ExitCode::FAILURE
        }
    }
}
