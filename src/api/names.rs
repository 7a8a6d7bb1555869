//! The name and reference rules several files of the API check: DNS labels and subdomains, image references,
//! instance types, driver versions, extended-resource names, namespace lists.

use std::sync::LazyLock;

pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
pub static DNS_LABEL: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(DNS_LABEL_PATTERN).unwrap());
pub(super) static DNS_SUBDOMAIN: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap());
pub(super) static IMAGE_REF: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(r"^[^\s]+$").unwrap());
pub(super) static INSTANCE_TYPE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[a-z0-9][a-z0-9-]*\.[a-z0-9]+$").unwrap());
pub(super) static DRIVER_VERSION: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[0-9]+(\.[0-9]+){1,3}$").unwrap());

/// `<DNS subdomain>/<name>`, outside the `kubernetes.io` domains (which the API server keeps for itself).
pub const EXTENDED_RESOURCE_PATTERN: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
pub(super) static EXTENDED_RESOURCE: LazyLock<regex::Regex> = LazyLock::new(|| {
    // The regex crate has no look-around: the kubernetes.io exclusion is checked in `validate`.
    regex::Regex::new(EXTENDED_RESOURCE_PATTERN).unwrap()
});

pub(crate) fn validate_namespace_names(names: &[String]) -> Result<(), validator::ValidationError> {
    match names.iter().find(|name| name.len() > 63 || !DNS_LABEL.is_match(name)) {
        Some(bad) => Err(validator::ValidationError::new("namespace")
            .with_message(format!("{bad:?} is not a valid namespace name (DNS label)").into())),
        None => Ok(()),
    }
}
