use super::*;

fn write_pair(dir: &Path, name: &str) -> rcgen::CertifiedKey<rcgen::KeyPair> {
    let made = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    std::fs::write(dir.join("tls.crt"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
    made
}

#[test]
fn a_certificate_comes_from_a_directory_or_is_made_at_start() {
    MetricsCertificate::load(None, false).expect("a self-signed certificate");

    let dir = std::env::temp_dir().join(format!("ndo-certs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = write_pair(&dir, "metrics.example");
    let files = read_files(&dir).unwrap();
    assert_eq!(parse(&dir, &files).unwrap().0, vec![made.cert.der().clone()]);
    MetricsCertificate::load(Some(&dir), false).expect("the directory's certificate");

    // A key that is not the certificate's, and a missing file, are one-line errors naming the problem.
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(dir.join("tls.key"), other.serialize_pem()).unwrap();
    let error = MetricsCertificate::load(Some(&dir), false).err().unwrap();
    assert_eq!(error.to_string(), "the metrics certificate and key do not match");
    std::fs::remove_file(dir.join("tls.crt")).unwrap();
    let error = format!("{:#}", MetricsCertificate::load(Some(&dir), false).err().unwrap());
    assert!(error.starts_with("cannot read the metrics certificate file ") && !error.contains('\n'), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The served configuration follows the files; a broken pair leaves the last good one in place.
#[tokio::test]
async fn a_renewed_pair_is_swapped_in_and_a_broken_one_is_not() {
    let dir = std::env::temp_dir().join(format!("ndo-renew-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    write_pair(&dir, "first.example");
    let certificate = MetricsCertificate::load(Some(&dir), false).unwrap();
    let target = axum_server::tls_rustls::RustlsConfig::from_config(certificate.config.clone());
    let first = target.get_inner();
    let interval = Duration::from_millis(20);
    let task = tokio::spawn(certificate.keep_fresh_every(interval, target.clone()));
    let tick = || tokio::time::sleep(interval * 10);

    tick().await;
    assert!(Arc::ptr_eq(&first, &target.get_inner()), "unchanged files are not loaded again");
    write_pair(&dir, "second.example");
    tick().await;
    let second = target.get_inner();
    assert!(!Arc::ptr_eq(&first, &second), "the renewed pair is served");
    std::fs::write(dir.join("tls.key"), rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
    tick().await;
    assert!(Arc::ptr_eq(&second, &target.get_inner()), "a mismatched pair is not served");
    task.abort();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// HTTP/2 is offered in the handshake only with `--enable-http2`; HTTP/1.1 always.
#[test]
fn http2_is_offered_only_when_enabled() {
    let default = MetricsCertificate::load(None, false).unwrap();
    assert_eq!(default.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    assert!(!default.http2);
    let enabled = MetricsCertificate::load(None, true).unwrap();
    assert_eq!(enabled.config.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
}
