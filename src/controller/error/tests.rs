use super::*;

fn refused(code: u16, reason: &str, message: &str) -> kube::Error {
    kube::Error::Api(kube::core::Status { code, ..kube::core::Status::failure(message, reason) }.boxed())
}

#[test]
fn an_api_refusal_reads_as_one_line_without_the_status_dump() {
    let error = Error::Status(refused(403, "Forbidden", "neurondraconfigs \"c\" is forbidden"));
    assert_eq!(error.to_string(), "writing status: neurondraconfigs \"c\" is forbidden (403 Forbidden)");
    let write = ApplyError::Apply { kind: "DaemonSet".into(), name: "p".into(), source: refused(409, "Conflict", "x") };
    assert_eq!(Error::Writes(vec![write]).to_string(), "applying DaemonSet p: x (409 Conflict)");
    let finalizer = Error::Finalizer(Box::new(finalizer::Error::RemoveFinalizer(refused(500, "InternalError", "y"))));
    assert_eq!(finalizer.to_string(), "removing the finalizer: y (500 InternalError)");
    assert_eq!(finalizer.failures(), vec![(Category::FinalizerFailed, finalizer.to_string())]);
}

#[test]
fn every_category_is_a_known_metric_label() {
    let transient = || kube::Error::Service("timed out".into());
    let (kind, name) = ("DaemonSet".to_string(), "p".to_string());
    let writes = vec![
        ApplyError::Apply { kind: kind.clone(), name: name.clone(), source: transient() },
        ApplyError::Delete { kind, name: name.clone(), source: transient() },
        ApplyError::Evict { name, source: transient() },
        ApplyError::Evict { name: "q".into(), source: refused(403, "Forbidden", "no") },
        ApplyError::Evict { name: "r".into(), source: refused(409, "Conflict", "no") },
        ApplyError::Evict { name: "s".into(), source: refused(422, "Invalid", "no") },
    ];
    let errors = [
        Error::Writes(writes),
        Error::Status(transient()),
        Error::Probe(transient()),
        Error::Finalizer(Box::new(finalizer::Error::AddFinalizer(transient()))),
        Error::Finalizer(Box::new(finalizer::Error::UnnamedObject)),
        Error::Writes(Vec::new()),
    ];
    let mut seen: Vec<&str> = errors.iter().flat_map(|e| e.failures()).map(|(category, _)| category.as_str()).collect();
    seen.extend(errors.iter().map(|e| e.category().as_str()));
    seen.sort();
    seen.dedup();
    let mut known: Vec<&str> = Category::ALL.iter().map(|c| c.as_str()).collect();
    known.sort();
    assert_eq!(seen, known);
}
