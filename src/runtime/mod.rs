//! The process around the controller: the API client, leader election, the health and metrics servers, logs and
//! metrics, the metrics certificate, and the CRD check.

pub mod certs;
pub mod client;
pub mod crd;
pub mod leader;
pub mod reviews;
pub mod server;
pub mod telemetry;
