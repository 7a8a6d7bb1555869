//! The labels of `api_requests`: the verb and resource of each request the client sends and the status code of its
//! answer (`runtime::client` counts them).

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// get, list, watch, create, update, patch, delete.
    pub verb: String,
    /// Plural resource, with `/status` for the status subresource.
    pub resource: String,
    /// The HTTP status code of the answer (`200`, `404`, `409`, `429`), after the client's retries; `error` when no
    /// answer came (connection refused or reset, TLS, timeout).
    pub code: String,
}

/// The `code` of a request that got no HTTP answer.
pub const NO_ANSWER: &str = "error";

/// Verb and resource of a request, from its method and path
/// (`/api/v1/namespaces/ns/pods/name/status`, `/apis/group/version/resource`), and the code of its answer.
pub fn classify_request(method: &http::Method, uri: &http::Uri, status: Option<http::StatusCode>) -> RequestLabels {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..).unwrap_or_default(),
        Some(&"apis") => segments.get(3..).unwrap_or_default(),
        _ => &[],
    };
    // Skip `namespaces/<ns>` when a namespaced resource follows.
    let rest = if rest.len() > 2 && rest[0] == "namespaces" { &rest[2..] } else { rest };
    let mut resource = rest.first().copied().unwrap_or("unknown").to_string();
    let named = rest.len() > 1;
    if let Some(sub) = rest.get(2) {
        resource = format!("{resource}/{sub}");
    }
    let watch = uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    };
    let code = status.map_or_else(|| NO_ANSWER.to_string(), |status| status.as_str().to_string());
    RequestLabels { verb: verb.into(), resource, code }
}
