//! The scenario's table: one row per kind, fleet and fill, the template beside the plain claim of its size and its
//! bare twin.

use super::run::Figures;

pub struct Row {
    pub kind: &'static str,
    pub nodes: usize,
    pub fill: f64,
    pub pods: usize,
    pub template: Figures,
    pub plain: Figures,
    /// The template's requests without selectors or constraints (`kinds::bare`).
    pub bare: Figures,
}

impl Row {
    fn ratio(&self) -> f64 {
        if self.plain.pods_per_second > 0.0 { self.template.pods_per_second / self.plain.pods_per_second } else { 0.0 }
    }

    /// The plain claim's scheduler CPU over the template's, for the same pods: the ratio the other helpers' load on
    /// a shared machine disturbs least (CPU time, not wall time).
    fn cpu_ratio(&self) -> f64 {
        if self.template.scheduler_cpu > 0.0 { self.plain.scheduler_cpu / self.template.scheduler_cpu } else { 0.0 }
    }

    /// The bare twin's scheduler CPU over the template's: what the shape's selectors and constraints cost, apart
    /// from what its requests (an `All`, alternatives, the EFAs) cost any claim that makes them.
    fn shape_ratio(&self) -> f64 {
        if self.template.scheduler_cpu > 0.0 { self.bare.scheduler_cpu / self.template.scheduler_cpu } else { 0.0 }
    }

    /// The row as a Markdown table line.
    pub fn line(&self) -> String {
        let (t, p) = (&self.template, &self.plain);
        let unbound = |f: &Figures| if f.unbound > 0 { format!(" ({} unbound)", f.unbound) } else { String::new() };
        format!(
            "| {} | {} | {:.0}% | {} | {:.1}{} | {:.1}{} | {:.2}x | {:.1} / {:.1} | {:.0} / {:.0} | {:.1} / {:.1} | {:.2}x | {:.1} | {:.2}x | 0 |",
            self.kind,
            self.nodes,
            self.fill * 100.0,
            self.pods,
            t.pods_per_second,
            unbound(t),
            p.pods_per_second,
            unbound(p),
            self.ratio(),
            t.attempt_ms,
            p.attempt_ms,
            t.filter_us,
            p.filter_us,
            t.scheduler_cpu,
            p.scheduler_cpu,
            self.cpu_ratio(),
            self.bare.scheduler_cpu,
            self.shape_ratio(),
        )
    }
}

#[derive(Default)]
pub struct Table {
    pub rows: Vec<Row>,
}

impl Table {
    pub fn print(&self) {
        println!(
            "| kind | nodes | fill | timed pods | template pods/s | plain pods/s | ratio | attempt ms (template / plain) \
             | DRA Filter µs (template / plain) | scheduler CPU s (template / plain) | CPU ratio | bare CPU s | CPU ratio to bare | operator CPU s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for row in &self.rows {
            println!("{}", row.line());
        }
    }
}
