//! What names this release in the bundle: the package, its channels, the version, and the CSV's history fields.
//! Update `CREATED_AT` and `REPLACES` at release.

pub const PACKAGE: &str = "neuron-dra-operator";
/// OLM's channel naming convention: `candidate` ⊇ `fast` ⊇ `stable`; a release goes into all three, and a
/// subscription without a channel follows `stable`.
pub const CHANNELS: &[&str] = &["candidate", "fast", "stable"];
pub const DEFAULT_CHANNEL: &str = "stable";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// When this version was released (the CSV's `createdAt`); a constant so generation stays deterministic. Set it
/// with the version at release.
pub(super) const CREATED_AT: &str = "2026-11-30T00:00:00Z";
pub(super) const REPOSITORY: &str = "https://github.com/neurondra/neuron-dra-operator";
/// The CSV this version replaces in the channel: none for the first release. Set it to the previous release's CSV
/// name when releasing; `olm.skipRange` already lets OLM upgrade from any older version.
pub(super) const REPLACES: Option<&str> = None;
