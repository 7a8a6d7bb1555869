//! Publishing an event: a write like any other, and one that never fails a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};

use crate::controller::Context;
use crate::logic::text;

/// Publishes one event; a failure to publish is logged, never fails the reconcile.
pub async fn publish(
    ctx: &Context,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: None };
    send(ctx, reference, &event).await;
}

/// Publishes a built event (one with a related object, say); a failure to publish is logged, never fails the
/// reconcile.
pub async fn send(ctx: &Context, reference: &ObjectReference, event: &Event) {
    // The API server refuses a note over 1 KiB, and the event with it: cut it instead.
    let fitted = event.note.as_deref().map(|note| text::fit(note, text::EVENT_NOTE_LIMIT).into_owned());
    let event = &Event {
        type_: event.type_,
        reason: event.reason.clone(),
        note: fitted,
        action: event.action.clone(),
        secondary: event.secondary.clone(),
    };
    if let Err(error) = ctx.recorder.publish(event, reference).await {
        tracing::warn!(error = %crate::runtime::client::brief(&error), reason = %event.reason, "publishing an event");
    }
}
