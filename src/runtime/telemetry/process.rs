//! The process metrics every Prometheus client library exports, under the names and help of client_golang's process
//! collector (so the dashboards and alerts written for any controller read them): CPU seconds, resident and virtual
//! memory, open and maximum file descriptors, and the start time. Read from `/proc/self` at each scrape.
//!
//! prometheus-client, the operator's metrics library, has no process collector (prometheus/client_rust#29), and the
//! one Linkerd publishes for it (kubert-prometheus-process) is built against an older prometheus-client whose
//! `Collector` trait is another type; the `/proc` parsing is procfs', the crate the `prometheus` crate's own process
//! collector uses.

use procfs::process::{LimitValue, Process};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// One scrape's reading of `/proc/self`.
#[derive(Debug, Default, PartialEq)]
pub struct Reading {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub start_time_seconds: f64,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

impl Reading {
    /// None where `/proc` is missing (not Linux): the collector then exports nothing.
    pub fn now() -> Option<Reading> {
        let process = Process::myself().ok()?;
        let stat = process.stat().ok()?;
        let ticks = procfs::ticks_per_second() as f64;
        let boot = procfs::boot_time_secs().unwrap_or_default() as f64;
        let max_fds = process.limits().ok().and_then(|limits| match limits.max_open_files.soft_limit {
            LimitValue::Value(value) => Some(value),
            LimitValue::Unlimited => None,
        });
        Some(Reading {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            resident_bytes: stat.rss * procfs::page_size(),
            virtual_bytes: stat.vsize,
            start_time_seconds: boot + stat.starttime as f64 / ticks,
            open_fds: process.fd_count().ok().map(|count| count as u64),
            max_fds,
        })
    }
}

/// Registered on the registry's root, so the names carry no `neuron_dra_operator_` prefix.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(reading) = Reading::now() else { return Ok(()) };
        let cpu = ConstCounter::new(reading.cpu_seconds);
        let help = "Total user and system CPU time spent in seconds.";
        cpu.encode(encoder.encode_descriptor("process_cpu_seconds", help, None, cpu.metric_type())?)?;
        let mut gauge = |name: &str, help: &str, value: f64| -> Result<(), std::fmt::Error> {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
        };
        gauge("process_resident_memory_bytes", "Resident memory size in bytes.", reading.resident_bytes as f64)?;
        gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", reading.virtual_bytes as f64)?;
        let help = "Start time of the process since unix epoch in seconds.";
        gauge("process_start_time_seconds", help, reading.start_time_seconds)?;
        if let Some(open) = reading.open_fds {
            gauge("process_open_fds", "Number of open file descriptors.", open as f64)?;
        }
        if let Some(max) = reading.max_fds {
            gauge("process_max_fds", "Maximum number of open file descriptors.", max as f64)?;
        }
        Ok(())
    }
}
