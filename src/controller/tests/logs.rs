//! What a pass logs.

use kube::ResourceExt;
use serde_json::json;

use super::fixtures::Fixture;
use super::{EVENT, config, converged};
use crate::api::labels::ANNOTATION_SPEC_HASH;

/// The log lines of one test, as the operator's plain-text format writes them.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log of one pass in which the `Replaced` event fails to publish: a warning logged deep in the pass, with no
/// config field of its own.
async fn log_of_a_pass(c: &crate::api::NeuronDRAConfig) -> String {
    let mut world = converged(c);
    world.templates[0].annotations_mut().insert(ANNOTATION_SPEC_HASH.into(), "an-older-spec".into());
    let fixture = Fixture::new(&world);
    fixture.fail(EVENT, 500, "events are away", 1);
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
    {
        let _default = tracing::subscriber::set_default(subscriber);
        // Other tests' threads log with no subscriber; what they registered first would otherwise keep the span
        // disabled here (tracing caches each callsite's interest across threads).
        tracing::callsite::rebuild_interest_cache();
        fixture.reconcile(c).await.unwrap();
    }
    String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
}

#[tokio::test]
async fn every_line_a_pass_logs_names_its_config() {
    let c = config(json!({}));
    // Another test thread can still recompute the interest of every callsite between our rebuild and the pass (seen
    // in CI: the pass logged with its span disabled). A pass whose log has no span at all is run again; a pass that
    // logs some lines inside its span and some outside fails at once.
    let mut logs = String::new();
    for _ in 0..5 {
        logs = log_of_a_pass(&c).await;
        if logs.contains("reconcile{") {
            break;
        }
    }
    let lines: Vec<&str> = logs.lines().collect();
    assert!(lines.iter().any(|l| l.contains("publishing an event")), "the failed publish is logged: {logs}");
    assert!(lines.iter().all(|l| l.contains("reconcile{config=c}")), "a line without its config: {logs}");
}
