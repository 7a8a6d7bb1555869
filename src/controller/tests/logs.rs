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

#[tokio::test]
async fn every_line_a_pass_logs_names_its_config() {
    let c = config(json!({}));
    let mut world = converged(&c);
    world.templates[0].annotations_mut().insert(ANNOTATION_SPEC_HASH.into(), "an-older-spec".into());
    let fixture = Fixture::new(&world);
    // The `Replaced` event fails to publish: a warning logged deep in the pass, with no config field of its own.
    fixture.fail(EVENT, 500, "events are away", 1);
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
    {
        let _default = tracing::subscriber::set_default(subscriber);
        // Other tests' threads log with no subscriber; what they registered first would otherwise keep the span
        // disabled here (tracing caches each callsite's interest across threads).
        tracing::callsite::rebuild_interest_cache();
        fixture.reconcile(&c).await.unwrap();
    }
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = logs.lines().collect();
    assert!(lines.iter().any(|l| l.contains("publishing an event")), "the failed publish is logged: {logs}");
    assert!(lines.iter().all(|l| l.contains("reconcile{config=c}")), "a line without its config: {logs}");
}
