//! One provider endpoint over awc (runtime.md §16.3): credential headers, timeouts (connect 10 s,
//! request 300 s) and retries (429, 5xx and transport errors, twice, after 1 s then 2 s).
//!
//! awc futures are not `Send`: a [`ProviderClient`] is made inside the task that uses it, on the
//! arbiter that runs the task, and never crosses threads. The API key goes only into the request
//! header, marked sensitive; no error text, log line or trace carries it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use awc::http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};

use super::ModelConfig;
use super::wire::{self, ANTHROPIC_VERSION};
use crate::manifest::Provider;

/// Largest reply body read; a provider reply is far smaller, this only bounds memory.
const MAX_BODY: usize = 32 << 20;

/// Retry and timeout settings of provider requests; tests shorten them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// The wait before each retry; its length is the number of retries.
    pub delays: Vec<Duration>,
    /// Bound on opening a connection (TLS handshake included).
    pub connect: Duration,
    /// Bound on one attempt, from sending the request to reading the whole reply.
    pub request: Duration,
}

impl Default for Retry {
    /// The spec's values (§16.3, §18).
    fn default() -> Self {
        Retry {
            delays: vec![Duration::from_secs(1), Duration::from_secs(2)],
            connect: Duration::from_secs(10),
            request: Duration::from_secs(300),
        }
    }
}

/// The root certificates for `https` endpoints, built once per process.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS cannot be set up: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}

/// A provider endpoint, as one task talks to it.
pub struct ProviderClient {
    http: awc::Client,
    url: String,
    provider: Provider,
    /// The `Authorization` or `x-api-key` value, marked sensitive.
    credential: Option<HeaderValue>,
    /// The key itself, only to scrub it from a quoted error body.
    secret: Option<Arc<str>>,
    retry: Retry,
}

impl std::fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderClient")
            .field("url", &self.url)
            .field("provider", &self.provider)
            .field("credential", &self.credential.as_ref().map(|_| "[redacted]"))
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// How one attempt went.
enum Attempt {
    /// The provider answered with this status and body.
    Answered(u16, Vec<u8>),
    /// No answer: connection refused or reset, TLS failure, timeout.
    Transport(String),
}

impl ProviderClient {
    /// A client for `config`'s endpoint. `Err` when TLS cannot be set up or the key cannot be a
    /// header value (a control character in it).
    pub fn new(config: &ModelConfig, retry: &Retry) -> Result<ProviderClient, String> {
        let mut connector = awc::Connector::new()
            .timeout(retry.connect)
            .handshake_timeout(retry.connect);
        if config.url.starts_with("https://") {
            connector = connector.rustls_0_23(tls_config()?);
        }
        let http = awc::Client::builder()
            .connector(connector)
            // A redirect could carry the credential to another host.
            .disable_redirects()
            .disable_timeout()
            .finish();
        let credential = match config.api_key.as_ref() {
            None => None,
            Some(key) => {
                let value = match config.provider {
                    Provider::OpenAi => format!("Bearer {}", key.expose()),
                    Provider::Anthropic => key.expose().to_string(),
                };
                let mut v = HeaderValue::from_str(&value)
                    .map_err(|_| "the API key holds characters a header cannot carry".to_string())?;
                v.set_sensitive(true);
                Some(v)
            }
        };
        Ok(ProviderClient {
            http,
            url: config.url.clone(),
            provider: config.provider,
            credential,
            secret: config.api_key.as_ref().map(|k| Arc::from(k.expose())),
            retry: retry.clone(),
        })
    }

    /// POSTs one turn's body and returns the reply body of a 2xx answer, retrying 429, 5xx and
    /// transport errors as [`Retry`] says. `Err` is the task's failure text.
    pub async fn send(&self, body: &str) -> Result<Vec<u8>, String> {
        let mut attempt = 0;
        loop {
            let outcome = self.attempt(body).await;
            let retry_after = self.retry.delays.get(attempt).copied();
            match outcome {
                Attempt::Answered(status, bytes) if (200..300).contains(&status) => return Ok(bytes),
                Attempt::Answered(status, bytes) if !wire::retryable(status) || retry_after.is_none() => {
                    return Err(wire::failure_text(status, &bytes, self.secret.as_deref()));
                }
                Attempt::Transport(why) if retry_after.is_none() => {
                    return Err(format!("inference failed: no reply from {}: {why}", self.url));
                }
                _ => {}
            }
            if let Some(wait) = retry_after {
                actix_rt::time::sleep(wait).await;
            }
            attempt += 1;
        }
    }

    async fn attempt(&self, body: &str) -> Attempt {
        let mut req = self
            .http
            .post(&self.url)
            .insert_header((CONTENT_TYPE, "application/json"))
            .insert_header(("accept", "application/json"));
        match (self.provider, &self.credential) {
            (Provider::OpenAi, Some(v)) => req = req.insert_header((AUTHORIZATION, v.clone())),
            (Provider::Anthropic, Some(v)) => req = req.insert_header(("x-api-key", v.clone())),
            (_, None) => {}
        }
        if self.provider == Provider::Anthropic {
            req = req.insert_header(("anthropic-version", ANTHROPIC_VERSION));
        }
        let exchange = async {
            let mut resp = req.send_body(body.to_string()).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let bytes = resp.body().limit(MAX_BODY).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((status, bytes.to_vec()))
        };
        match actix_rt::time::timeout(self.retry.request, exchange).await {
            Ok(Ok((status, bytes))) => Attempt::Answered(status, bytes),
            Ok(Err(why)) => Attempt::Transport(why),
            Err(_) => Attempt::Transport(format!("no complete reply within {:?}", self.retry.request)),
        }
    }
}
