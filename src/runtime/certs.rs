//! The certificate `/metrics` presents: `tls.crt` and `tls.key` of `--metrics-cert-dir` (a mounted
//! `kubernetes.io/tls` Secret, cert-manager's for example), read again whenever they change, or a self-signed one
//! made at start.
//!
//! The kubelet renews a Secret volume by writing the new files beside the old and swapping the `..data` symlink, so
//! both files change at once; cert-manager renews a certificate well before it expires. The directory is polled
//! (two small reads every few seconds) rather than watched: an inotify watch on a symlink swap needs the parent
//! directory watched and re-armed after each swap, while a poll sees every way the files can change, and the
//! handshake that follows a renewal by a few seconds still gets a certificate that is valid.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How often `--metrics-cert-dir` is read again.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// The TLS configuration of `/metrics`, and where it came from.
pub struct MetricsCertificate {
    pub config: Arc<rustls::ServerConfig>,
    /// Whether HTTP/2 is offered (`--enable-http2`); off, TLS negotiates HTTP/1.1 only.
    pub http2: bool,
    /// The directory and the files the config was made from; None for a self-signed certificate.
    source: Option<(PathBuf, Files)>,
}

impl MetricsCertificate {
    /// The directory's certificate, or a self-signed one made now; an unreadable or mismatched pair is an error.
    /// `http2`: offer HTTP/2 in the TLS handshake (ALPN `h2`) besides HTTP/1.1.
    pub fn load(cert_dir: Option<&Path>, http2: bool) -> anyhow::Result<Self> {
        let Some(dir) = cert_dir else {
            return Ok(Self { config: server_config(self_signed()?, http2)?, http2, source: None });
        };
        let files = read_files(dir)?;
        let config = server_config(parse(dir, &files)?, http2)?;
        Ok(Self { config, http2, source: Some((dir.to_path_buf(), files)) })
    }

    /// Keeps `target` on the directory's current certificate: every `RELOAD_INTERVAL`, files whose bytes changed
    /// are loaded and swapped in for the next handshakes. A pair that does not load (half written, key and
    /// certificate from different renewals) is logged and the certificate in use kept, until the files are whole.
    /// Returns at once for a self-signed certificate.
    pub async fn keep_fresh(self, target: axum_server::tls_rustls::RustlsConfig) {
        self.keep_fresh_every(RELOAD_INTERVAL, target).await
    }

    async fn keep_fresh_every(self, interval: Duration, target: axum_server::tls_rustls::RustlsConfig) {
        let http2 = self.http2;
        let Some((dir, mut loaded)) = self.source else { return };
        // A pair that did not load is not tried again until its files change.
        let mut refused = None;
        loop {
            tokio::time::sleep(interval).await;
            let files = match read_files(&dir) {
                Ok(files) if files != loaded && refused.as_ref() != Some(&files) => files,
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(error = format!("{error:#}"), "keeping the metrics certificate in use");
                    continue;
                }
            };
            match parse(&dir, &files).and_then(|certificate| server_config(certificate, http2)) {
                Ok(config) => {
                    target.reload_from_config(config);
                    (loaded, refused) = (files, None);
                    tracing::info!(dir = %dir.display(), "loaded the renewed metrics certificate");
                }
                Err(error) => {
                    tracing::warn!(error = format!("{error:#}"), "keeping the metrics certificate in use");
                    refused = Some(files);
                }
            }
        }
    }
}

/// The bytes of tls.crt and tls.key.
type Files = (Vec<u8>, Vec<u8>);

/// The files as they are now (two small reads: kept and compared whole, no digest needed).
fn read_files(dir: &Path) -> anyhow::Result<Files> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).with_context(|| format!("cannot read the metrics certificate file {}", path.display()))
    };
    Ok((read("tls.crt")?, read("tls.key")?))
}

type Certificate = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn parse(dir: &Path, (cert, key): &Files) -> anyhow::Result<Certificate> {
    let cert_file = dir.join("tls.crt");
    let certs = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot read the metrics certificate {}", cert_file.display()))?;
    anyhow::ensure!(!certs.is_empty(), "no certificate in {}", cert_file.display());
    let key = PrivateKeyDer::from_pem_slice(key)
        .with_context(|| format!("cannot read the metrics key {}", dir.join("tls.key").display()))?;
    Ok((certs, key))
}

/// The TLS configuration of a certificate. HTTP/2 is offered only when asked: its stream multiplexing is what the
/// rapid-reset attacks (CVE-2023-44487, CVE-2023-39325) abuse, and a scrape needs none of it, so HTTP/1.1 is the
/// default, as controller-runtime's `--enable-http2=false`.
fn server_config((certs, key): Certificate, http2: bool) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    // ring: the provider kube's own rustls already uses, so there is no process-wide default to pick.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the metrics certificate and key do not match")?;
    config.alpn_protocols = alpn(http2);
    Ok(Arc::new(config))
}

/// The application protocols offered in the handshake, preferred first.
fn alpn(http2: bool) -> Vec<Vec<u8>> {
    if http2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] }
}

fn self_signed() -> anyhow::Result<Certificate> {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let generated = rcgen::generate_simple_self_signed(names).context("generating the metrics certificate")?;
    let key = PrivateKeyDer::Pkcs8(generated.signing_key.serialize_der().into());
    Ok((vec![generated.cert.der().clone()], key))
}

#[cfg(test)]
mod tests;
