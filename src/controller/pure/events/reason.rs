//! Every reason the operator's Events carry, one type: a reader (or an alert on `kubectl get events
//! --field-selector reason=...`) finds the whole list here.

use super::super::failure::Category;
use crate::logic::status::Reason;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventReason {
    /// The reason of the condition the event explains (`Conflict`, `ForeignObject`, an invalid spec, ...).
    Condition(Reason),
    /// A failure's category (`Forbidden`, `ApplyFailed`, ...).
    Failure(Category),
    Created,
    Updated,
    Replaced,
    Deleted,
    Remediated,
    Released,
    RemediationHeldBack,
    RolloutStep,
    RolloutHalted,
    RolloutComplete,
    RolloutBack,
    RolledBack,
    UnhealthyDeviceInUse,
    DeviceUnhealthy,
    DeviceRecovered,
}

impl EventReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Condition(reason) => reason.as_str(),
            Self::Failure(category) => category.as_str(),
            Self::Created => "Created",
            Self::Updated => "Updated",
            Self::Replaced => "Replaced",
            Self::Deleted => "Deleted",
            Self::Remediated => "Remediated",
            Self::Released => "Released",
            Self::RemediationHeldBack => "RemediationHeldBack",
            Self::RolloutStep => "RolloutStep",
            Self::RolloutHalted => "RolloutHalted",
            Self::RolloutComplete => "RolloutComplete",
            Self::RolloutBack => "RolloutBack",
            Self::RolledBack => "RolledBack",
            Self::UnhealthyDeviceInUse => "UnhealthyDeviceInUse",
            Self::DeviceUnhealthy => "DeviceUnhealthy",
            Self::DeviceRecovered => "DeviceRecovered",
        }
    }
}
