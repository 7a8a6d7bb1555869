//! Attacks with real credentials on the real API server: a client per token, any write of any kind as that client,
//! and the server's answer in one line (`403 <message>`), so that a test checks which rule refused it.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::Value;

use super::cluster::{OPERATOR_NAMESPACE, OPERATOR_SA, client_from, token, token_kubeconfig};

/// How long a policy, binding or parameter just installed may take to reach admission (the API server's informers).
pub const LOADED: Duration = Duration::from_secs(60);

/// A client that authenticates with `token` (its kubeconfig is `<tmp>/<name>.kubeconfig`).
pub async fn client_with(token: &str, name: &str) -> Client {
    client_from(&token_kubeconfig(&std::env::temp_dir().join(format!("{name}.kubeconfig")), token)).await
}

/// A client with a token of the operator's ServiceAccount, as a stolen token would be used.
pub async fn operator(id: &str) -> Client {
    client_with(&token(OPERATOR_NAMESPACE, OPERATOR_SA, &[]), &format!("{id}-operator")).await
}

/// `object` labelled as the operator's (`app.kubernetes.io/managed-by: neuron-dra-operator`).
pub fn ours(mut object: Value) -> Value {
    object["metadata"]["labels"]["app.kubernetes.io/managed-by"] = serde_json::json!("neuron-dra-operator");
    object
}

/// The API of an object's kind and namespace (from its `apiVersion`, `kind` and `metadata.namespace`), as `client`.
pub async fn api(client: &Client, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("the object names its apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().expect("the object names its kind"));
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("the server does not serve {api_version} {}: {e}", gvk.kind));
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().expect("the object has a name")
}

/// The server's answer: Ok, or `<code> <message>` in one line.
pub fn answer<T>(result: Result<T, kube::Error>) -> Result<(), String> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(format!("{} {}", status.code, status.message.replace('\n', " "))),
        Err(other) => Err(other.to_string().replace('\n', " ")),
    }
}

pub async fn create(client: &Client, object: &Value) -> Result<(), String> {
    let api = api(client, object).await;
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("a Kubernetes object");
    answer(api.create(&PostParams::default(), &object).await)
}

/// A JSON merge patch of `object` (which names the kind, namespace and name).
pub async fn patch(client: &Client, object: &Value, patch: &Value) -> Result<(), String> {
    answer(api(client, object).await.patch(name(object), &PatchParams::default(), &Patch::Merge(patch)).await)
}

/// A strategic merge patch of `object` (lists of containers merge by name).
pub async fn patch_strategic(client: &Client, object: &Value, patch: &Value) -> Result<(), String> {
    answer(api(client, object).await.patch(name(object), &PatchParams::default(), &Patch::Strategic(patch)).await)
}

/// A strategic merge patch of the object's `status` subresource (a Node's conditions merge by type).
pub async fn patch_status(client: &Client, object: &Value, patch: &Value) -> Result<(), String> {
    let api = api(client, object).await;
    answer(api.patch_status(name(object), &PatchParams::default(), &Patch::Strategic(patch)).await)
}

pub async fn delete(client: &Client, object: &Value) -> Result<(), String> {
    answer(api(client, object).await.delete(name(object), &DeleteParams::default()).await)
}

/// The object as stored, or None.
pub async fn get(client: &Client, object: &Value) -> Option<Value> {
    let found = api(client, object).await.get_opt(name(object)).await.unwrap();
    found.map(|o| serde_json::to_value(o).unwrap())
}

/// Asserts that the server refused with 403 and a message that contains `rule`; returns the message.
pub fn assert_refused(what: &str, answer: Result<(), String>, rule: &str) -> String {
    match answer {
        Ok(()) => panic!("{what}: accepted, expected a refusal naming \"{rule}\""),
        Err(message) => {
            assert!(
                message.starts_with("403 ") && message.contains(rule),
                "{what}: expected 403 \"{rule}\", got {message}"
            );
            message
        }
    }
}

pub fn assert_accepted(what: &str, answer: Result<(), String>) {
    if let Err(message) = answer {
        panic!("{what}: refused: {message}");
    }
}

/// Creates `object` as `client` until the server refuses it with 403 and a message that contains `rule`, for at most
/// `LOADED`: a policy or parameter just installed is not in force at once. Each create that goes through meanwhile
/// is deleted again by `admin`; any other answer is tried again and, at the deadline, reported.
pub async fn refused_create(what: &str, client: &Client, admin: &Client, object: &Value, rule: &str) -> String {
    let deadline = Instant::now() + LOADED;
    loop {
        let last = match create(client, object).await {
            Ok(()) => {
                let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
                let undone = answer(api(admin, object).await.delete(name(object), &now).await);
                undone.unwrap_or_else(|e| panic!("{what}: undoing the accepted create: {e}"));
                "accepted".to_string()
            }
            Err(message) if message.starts_with("403 ") && message.contains(rule) => return message,
            Err(message) => message,
        };
        assert!(Instant::now() < deadline, "{what}: expected 403 \"{rule}\" within {LOADED:?}, last answer: {last}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Creates `object` as `client` until the server accepts it, for at most `LOADED` (a parameter just changed).
pub async fn accepted_create(what: &str, client: &Client, object: &Value) {
    accepted(what, || create(client, object)).await
}

/// Makes a write until the server accepts it, for at most `LOADED` (a parameter just changed reaches admission
/// within seconds), and reports the last refusal at the deadline.
pub async fn accepted<F, Fut>(what: &str, write: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + LOADED;
    while let Err(message) = write().await {
        assert!(Instant::now() < deadline, "{what}: still refused after {LOADED:?}: {message}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Makes a write until the server refuses it with 403 and a message that contains `rule`, for at most `LOADED` (a
/// policy just changed); returns the message.
pub async fn refused<F, Fut>(what: &str, write: F, rule: &str) -> String
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + LOADED;
    loop {
        let last = match write().await {
            Err(message) if message.starts_with("403 ") && message.contains(rule) => return message,
            Err(message) => message,
            Ok(()) => "accepted".to_string(),
        };
        assert!(Instant::now() < deadline, "{what}: expected 403 \"{rule}\" within {LOADED:?}, last answer: {last}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
