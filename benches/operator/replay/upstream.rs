//! What the replay forwards to the real API server, the DaemonSet status it rewrites on the way back, and the
//! plugin DaemonSets it follows there (their uid and current revision make the generated plugin pods).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use neuron_dra_operator::api::labels::{LABEL_CONFIG, LABEL_MANAGED_BY, MANAGER};
use serde_json::{Value, json};

use super::serve::pod_template;
use super::shared::{Kind, Plugin, Shared};

/// Sends the request on to the API server under the operator's ServiceAccount; the answer comes back as it is, but
/// for the status of the operator's DaemonSets (see `report_fleet`).
pub async fn forward(shared: &Arc<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return (axum::http::StatusCode::BAD_REQUEST, "unreadable body").into_response();
    };
    let target = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    let daemon_sets = parts.method == axum::http::Method::GET && parts.uri.path().contains("/daemonsets");
    let watching = parts.uri.query().is_some_and(|q| q.contains("watch=true") || q.contains("watch=1"));
    let mut builder = http::Request::builder().method(parts.method.clone()).uri(target);
    for (name, value) in &parts.headers {
        if ![
            http::header::HOST,
            http::header::AUTHORIZATION,
            http::header::CONTENT_LENGTH,
            http::header::ACCEPT_ENCODING,
        ]
        .contains(name)
        {
            builder = builder.header(name, value);
        }
    }
    shared.forwarded_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    let request = builder.body(kube::client::Body::from(body.to_vec())).unwrap();
    let response = match shared.upstream.send(request).await {
        Ok(response) => response,
        Err(error) => return (axum::http::StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    };
    let (mut parts, body) = response.into_parts();
    let nodes = shared.model.nodes;
    let data = Body::new(body).into_data_stream();
    if !daemon_sets {
        let counted = count(shared.clone(), data);
        return Response::from_parts(parts, Body::from_stream(counted));
    }
    // A body of our own: none of the upstream's framing headers apply to it.
    for framing in [http::header::CONTENT_LENGTH, http::header::TRANSFER_ENCODING, http::header::CONNECTION] {
        parts.headers.remove(framing);
    }
    parts.version = http::Version::HTTP_11;
    if watching {
        let lines = lines(count(shared.clone(), data)).map(move |line| line.map(|line| rewrite_event(&line, nodes)));
        return Response::from_parts(parts, Body::from_stream(lines));
    }
    let whole: Vec<Bytes> = data.filter_map(|c| async { c.ok() }).collect().await;
    let whole = whole.concat();
    let body = match serde_json::from_slice::<Value>(&whole) {
        Ok(mut object) => {
            report_fleet(&mut object, nodes);
            for item in object["items"].as_array_mut().into_iter().flatten() {
                report_fleet(item, nodes);
            }
            serde_json::to_vec(&object).unwrap()
        }
        Err(_) => whole,
    };
    shared.forwarded_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    Response::from_parts(parts, Body::from(body))
}

type Data = futures::stream::BoxStream<'static, Result<Bytes, axum::Error>>;

fn count(shared: Arc<Shared>, data: impl futures::Stream<Item = Result<Bytes, axum::Error>> + Send + 'static) -> Data {
    data.inspect(move |chunk| {
        if let Ok(chunk) = chunk {
            shared.forwarded_bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
    })
    .boxed()
}

/// The stream cut at newlines (a watch sends one event a line).
fn lines(data: impl futures::Stream<Item = Result<Bytes, axum::Error>> + Send + Unpin + 'static) -> Data {
    futures::stream::unfold((data, Vec::<u8>::new()), |(mut data, mut buffer)| async move {
        loop {
            if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                return Some((Ok(Bytes::from(line)), (data, buffer)));
            }
            match data.next().await {
                Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                _ if buffer.is_empty() => return None,
                _ => return Some((Ok(Bytes::from(std::mem::take(&mut buffer))), (data, buffer))),
            }
        }
    })
    .boxed()
}

fn rewrite_event(line: &[u8], nodes: usize) -> Bytes {
    match serde_json::from_slice::<Value>(line) {
        Ok(mut event) => {
            report_fleet(&mut event["object"], nodes);
            let mut line = serde_json::to_vec(&event).unwrap();
            line.push(b'\n');
            Bytes::from(line)
        }
        Err(_) => Bytes::copy_from_slice(line),
    }
}

/// The status the DaemonSet controller would write with the whole replayed fleet scheduled, ready and updated.
fn report_fleet(object: &mut Value, nodes: usize) {
    let ours = object["metadata"]["labels"][LABEL_MANAGED_BY].as_str() == Some(MANAGER);
    if !ours || object["kind"].as_str().is_some_and(|k| k != "DaemonSet") {
        return;
    }
    let generation = object["metadata"]["generation"].clone();
    object["status"] = json!({
        "currentNumberScheduled": nodes, "desiredNumberScheduled": nodes, "numberAvailable": nodes,
        "numberMisscheduled": 0, "numberReady": nodes, "updatedNumberScheduled": nodes,
        "observedGeneration": generation,
    });
}

/// Follows the operator's DaemonSets and their newest ControllerRevision upstream; when that changes, the plugin
/// pods' watches are told 410 and relist the pods of the new revision.
pub async fn follow_plugins(shared: Arc<Shared>) {
    let selector = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    let daemon_sets: Api<DaemonSet> = Api::all(shared.upstream.clone());
    let revisions: Api<ControllerRevision> = Api::all(shared.upstream.clone());
    loop {
        if let (Ok(sets), Ok(revisions)) = (daemon_sets.list(&selector).await, revisions.list(&selector).await) {
            let mut plugins: Vec<Plugin> = sets
                .items
                .iter()
                .filter_map(|set| {
                    let uid = set.uid()?;
                    let newest = revisions
                        .items
                        .iter()
                        .filter(|r| r.owner_references().iter().any(|o| o.uid == uid))
                        .max_by_key(|r| r.revision)?;
                    Some(Plugin {
                        name: set.name_any(),
                        namespace: set.namespace()?,
                        config: set.labels().get(LABEL_CONFIG)?.clone(),
                        hash: newest.labels().get("controller-revision-hash")?.clone(),
                        uid,
                        version: 0,
                        pod: String::new(),
                    })
                })
                .collect();
            plugins.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            let changed = {
                let current = shared.plugins.lock().unwrap();
                current.len() != plugins.len()
                    || current.iter().zip(&plugins).any(|(a, b)| (&a.uid, &a.hash) != (&b.uid, &b.hash))
            };
            if changed {
                let version = shared.version() + 1;
                for plugin in &mut plugins {
                    plugin.version = version;
                    plugin.pod = pod_template(&shared, plugin);
                }
                *shared.plugins.lock().unwrap() = plugins;
                shared.expire(Kind::Pods);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
