//! The DriverReady condition from the driver's figures and its rollout.

use super::Reason;
use crate::api::{DriverStatus, RolloutState};
use crate::logic::image;
use crate::logic::rollout::halt_message;

/// DriverReady from the driver's figures: "12/40 nodes on 1.2.0, 38 ready", and the halt or step of a rollout.
pub fn driver_condition(status: &DriverStatus) -> (bool, Reason, String) {
    let version = status.image.as_deref().map(image::label).unwrap_or_default();
    let figures =
        format!("{}/{} nodes on {version}, {} ready", status.updated_nodes, status.desired_nodes, status.ready_nodes);
    match &status.rollout {
        // A rollback is a halt too: the spec's version is not what the failed nodes run.
        Some(rollout) if rollout.state.halted() => {
            (false, Reason::RolloutHalted, format!("{figures}; {}", halt_message(rollout)))
        }
        _ => {
            let done = status.ready_nodes >= status.desired_nodes && status.updated_nodes >= status.desired_nodes;
            let step = match &status.rollout {
                Some(r) if !done && r.state == RolloutState::Progressing && r.step > 0 => {
                    let nodes: Vec<&str> = r.step_nodes.iter().take(5).map(|n| n.node.as_str()).collect();
                    let what = if r.step == 1 { "canary".to_string() } else { format!("step {}", r.step) };
                    format!(" ({what}: {})", nodes.join(", "))
                }
                _ => String::new(),
            };
            let reason = if done { Reason::RolloutComplete } else { Reason::RollingOut };
            (done, reason, format!("{figures}{step}"))
        }
    }
}
