//! Publishing an event: a write like any other, and one that never fails a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Event;

use crate::controller::Context;
use crate::logic::text;

/// Publishes events in order; a failure to publish is logged and never fails the reconcile.
pub async fn publish(ctx: &Context, reference: &ObjectReference, events: &[Event]) {
    for event in events {
        send(ctx, reference, event).await;
    }
}

/// Publishes an event; a failure to publish is logged, never fails the reconcile.
async fn send(ctx: &Context, reference: &ObjectReference, event: &Event) {
    // The API server refuses a note over 1 KiB, and the event with it: cut it instead.
    let cut;
    let event = match event.note.as_deref() {
        Some(note) if note.len() > text::EVENT_NOTE_LIMIT => {
            let note = Some(text::fit(note, text::EVENT_NOTE_LIMIT).into_owned());
            let (reason, action, secondary) = (event.reason.clone(), event.action.clone(), event.secondary.clone());
            cut = Event { type_: event.type_, reason, note, action, secondary };
            &cut
        }
        _ => event,
    };
    if let Err(error) = ctx.recorder.publish(event, reference).await {
        tracing::warn!(error = %crate::runtime::client::brief(&error), reason = %event.reason, "publishing an event");
    }
}
