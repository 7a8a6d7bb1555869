//! The scenario's table: one row per kind, fleet, device order and fill, the template beside the plain claim of its
//! size (the medians of their paired runs) and its bare twin (one run).

use super::occupy::Fill;
use super::run::Figures;

pub struct Row {
    pub kind: &'static str,
    pub nodes: usize,
    /// Whether the fleet's slices list their devices in reverse (`occupy::reverse`).
    pub reversed: bool,
    pub fill: Fill,
    pub pods: usize,
    pub template: Figures,
    pub plain: Figures,
    /// The template's requests without selectors or constraints (`kinds::bare`).
    pub bare: Figures,
}

impl Row {
    /// The plain claim's scheduler CPU over the template's, for the same pods: the ratio the other load on a shared
    /// machine disturbs least (CPU time, not wall time).
    fn cpu_ratio(&self) -> f64 {
        if self.template.scheduler_cpu > 0.0 { self.plain.scheduler_cpu / self.template.scheduler_cpu } else { 0.0 }
    }

    /// The row as a Markdown table line.
    pub fn line(&self) -> String {
        let (t, p) = (&self.template, &self.plain);
        let bound = |f: &Figures| format!("{}/{}", f.bound, f.bound + f.unbound);
        format!(
            "| {} | {} | {} | {} | {} | {} / {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2}x | {:.1} |",
            self.kind,
            self.nodes,
            if self.reversed { "reversed" } else { "driver" },
            self.fill.label(),
            self.pods,
            bound(t),
            bound(p),
            t.pods_per_second,
            p.pods_per_second,
            t.bind_median,
            p.bind_median,
            t.bind_p95,
            p.bind_p95,
            t.scheduler_cpu,
            p.scheduler_cpu,
            self.cpu_ratio(),
            self.bare.scheduler_cpu,
        )
    }
}

pub struct Table {
    /// The server's version, printed above the table.
    pub version: String,
    pub rows: Vec<Row>,
}

impl Table {
    pub fn print(&self) {
        println!("Kubernetes {}", self.version);
        println!(
            "| kind | nodes | device order | fill | timed pods | bound (template / plain) | pods/s (template / plain) \
             | bind median s | bind p95 s | scheduler CPU s | CPU ratio (plain / template) | bare CPU s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for row in &self.rows {
            println!("{}", row.line());
        }
    }
}
