//! A client of the OCI distribution API, enough to push one file as an artifact: its blob, the
//! empty config, and a manifest that names the file and where it came from.
//!
//! The manifest is an OCI image manifest with the `artifactType`
//! `application/vnd.gpu-sandbox.promotion.v1`, the empty config (`{}`, the spec's empty descriptor)
//! and the file as its one layer, carrying the file's media type (by extension) and its name as
//! `org.opencontainers.image.title`, as ORAS does. The provenance is in the manifest's annotations
//! (`dev.gpu-sandbox.promotion.*`): user, session, editor image (`local/<editor>` for the local
//! runtime, the configured image for kube), checksum, path, time of the request and approving
//! admin.
//!
//! Blobs already in the repository are not sent again (`HEAD` first). Blobs go up in one `PUT` each
//! (the spec's monolithic upload), streamed from disk. The server computes the manifest's digest
//! itself and checks it against the registry's `Docker-Content-Digest`. Authentication is HTTP
//! basic only, sent to the configured registry's own origin only, never to an upload's `Location`
//! elsewhere. Registries that want a bearer-token exchange (Docker Hub, GHCR) are not supported
//! yet, nor are signatures (cosign) or scans before the push. A failed push gives the user a
//! sentence ("could not be reached", "refused the blob (403)"); the registry's own words and the
//! connection's details go to the log.

use app::domain::promotion::{ARTIFACT_TYPE, Provenance};
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncReadExt;

type Body = BoxBody<Bytes, std::io::Error>;
type HttpClient = crate::net::outbound::HttpsClient<Body>;

/// The OCI empty descriptor's content, `{}`: artifacts carry no config of their own.
const EMPTY_CONFIG: &[u8] = b"{}";
const EMPTY_CONFIG_TYPE: &str = "application/vnd.oci.empty.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// How long the registry may take to answer a request that carries no file.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// Read from disk and sent in pieces of this size.
const CHUNK: usize = 256 * 1024;

impl RegistryError {
    /// What the user and the admin pages are told; the details go to the log.
    pub fn user_message(&self) -> String {
        match self {
            RegistryError::Unreachable(_) => {
                "the registry could not be reached; an admin can retry once it is back".into()
            }
            RegistryError::Refused { what, status, .. } => {
                format!("the registry refused {what} ({status}); the server's log has its reason")
            }
            RegistryError::TimedOut(_) => self.to_string(),
            RegistryError::Io(_) => {
                "the server's copy of the file is gone; ask for the promotion again".into()
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the registry could not be reached: {0}")]
    Unreachable(String),
    #[error("the registry refused {what} ({status}): {message}")]
    Refused {
        what: &'static str,
        status: StatusCode,
        message: String,
    },
    #[error("the registry did not answer in time ({0})")]
    TimedOut(&'static str),
    #[error("reading the file: {0}")]
    Io(#[from] std::io::Error),
}

/// One file to push.
pub struct Artifact<'a> {
    pub repository: &'a str,
    pub tag: &'a str,
    pub file: &'a Path,
    pub size: u64,
    /// Hex.
    pub sha256: &'a str,
    pub media_type: &'a str,
    pub provenance: &'a Provenance,
}

pub struct Registry {
    /// `scheme://host[:port]`, no slash at the end.
    base: String,
    authorization: Option<HeaderValue>,
    http: HttpClient,
}

impl Registry {
    pub fn new(base: &str, username: &str, password: &str) -> Result<Registry, String> {
        let authorization = (!username.is_empty())
            .then(|| {
                use base64::Engine;
                let credentials = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{password}"));
                let mut value = HeaderValue::from_str(&format!("Basic {credentials}"))
                    .map_err(|_| "the registry's user name has characters a header cannot carry")?;
                value.set_sensitive(true);
                Ok::<_, String>(value)
            })
            .transpose()?;
        Ok(Registry {
            base: base.trim_end_matches('/').to_string(),
            authorization,
            http: crate::net::outbound::https_client()?,
        })
    }

    /// Pushes the file, the empty config and the manifest; returns the manifest's digest.
    pub async fn push(&self, artifact: &Artifact<'_>) -> Result<String, RegistryError> {
        // Missing, it would fail inside the upload's body, as if the registry had.
        tokio::fs::metadata(artifact.file).await?;
        let repository = artifact.repository;
        let file_digest = format!("sha256:{}", artifact.sha256);
        if !self.has_blob(repository, &file_digest).await? {
            // Time enough for the file at a slow 1 MiB/s, on top of the usual answer.
            let allowed = ANSWER_TIMEOUT + Duration::from_secs(artifact.size / (1024 * 1024));
            let body = StreamBody::new(read_in_chunks(artifact.file.to_path_buf())).boxed();
            self.upload(repository, &file_digest, artifact.size, allowed, body)
                .await?;
        }
        let config_digest = sha256_digest(EMPTY_CONFIG);
        if !self.has_blob(repository, &config_digest).await? {
            self.upload(
                repository,
                &config_digest,
                EMPTY_CONFIG.len() as u64,
                ANSWER_TIMEOUT,
                full(Bytes::from_static(EMPTY_CONFIG)),
            )
            .await?;
        }
        let manifest = manifest(artifact);
        let digest = sha256_digest(&manifest);
        let request = self
            .request(
                Method::PUT,
                &format!("{}/v2/{repository}/manifests/{}", self.base, artifact.tag),
            )
            .header(header::CONTENT_TYPE, MANIFEST_TYPE)
            .header(header::CONTENT_LENGTH, manifest.len())
            .body(full(Bytes::from(manifest)))
            .map_err(|e| RegistryError::Unreachable(e.to_string()))?;
        let response = self.send(request, ANSWER_TIMEOUT, "the manifest").await?;
        let response = expect(response, StatusCode::CREATED, "the manifest").await?;
        if let Some(theirs) = response.headers().get("docker-content-digest")
            && theirs.as_bytes() != digest.as_bytes()
        {
            return Err(RegistryError::Refused {
                what: "the manifest",
                status: response.status(),
                message: format!(
                    "it stored digest {}, not {digest}",
                    String::from_utf8_lossy(theirs.as_bytes())
                ),
            });
        }
        Ok(digest)
    }

    /// Where a pushed artifact can be pulled from, as tools write it.
    pub fn reference(&self, repository: &str, digest: &str) -> String {
        let host = self
            .base
            .split_once("://")
            .map_or(self.base.as_str(), |(_, host)| host);
        format!("{host}/{repository}@{digest}")
    }

    async fn has_blob(&self, repository: &str, digest: &str) -> Result<bool, RegistryError> {
        let request = self
            .request(
                Method::HEAD,
                &format!("{}/v2/{repository}/blobs/{digest}", self.base),
            )
            .body(empty())
            .map_err(|e| RegistryError::Unreachable(e.to_string()))?;
        let response = self.send(request, ANSWER_TIMEOUT, "a blob check").await?;
        match response.status() {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => expect(response, StatusCode::OK, "a blob check")
                .await
                .map(|_| false),
        }
    }

    /// Starts an upload and sends the whole blob in one `PUT`.
    async fn upload(
        &self,
        repository: &str,
        digest: &str,
        size: u64,
        allowed: Duration,
        body: Body,
    ) -> Result<(), RegistryError> {
        let request = self
            .request(
                Method::POST,
                &format!("{}/v2/{repository}/blobs/uploads/", self.base),
            )
            .header(header::CONTENT_LENGTH, 0)
            .body(empty())
            .map_err(|e| RegistryError::Unreachable(e.to_string()))?;
        let response = self.send(request, ANSWER_TIMEOUT, "an upload").await?;
        let response = expect(response, StatusCode::ACCEPTED, "an upload").await?;
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| RegistryError::Refused {
                what: "an upload",
                status: response.status(),
                message: "it gave no Location to upload to".into(),
            })?;
        let mut url = if location.starts_with("http://") || location.starts_with("https://") {
            location.to_string()
        } else {
            format!("{}{location}", self.base)
        };
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str("digest=");
        url.push_str(digest);
        let request = self
            .request(Method::PUT, &url)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(header::CONTENT_LENGTH, size)
            .body(body)
            .map_err(|e| RegistryError::Unreachable(e.to_string()))?;
        let response = self.send(request, allowed, "a blob").await?;
        expect(response, StatusCode::CREATED, "a blob").await?;
        Ok(())
    }

    /// A request; it carries the credentials only to the configured registry itself, not to
    /// wherever an upload's `Location` may point.
    fn request(&self, method: Method, url: &str) -> http::request::Builder {
        let builder = Request::builder().method(method).uri(url);
        let ours = origin(url).is_some_and(|o| Some(o) == origin(&self.base));
        match &self.authorization {
            Some(value) if ours => builder.header(header::AUTHORIZATION, value.clone()),
            _ => builder,
        }
    }

    async fn send(
        &self,
        request: Request<Body>,
        allowed: Duration,
        what: &'static str,
    ) -> Result<http::Response<hyper::body::Incoming>, RegistryError> {
        match tokio::time::timeout(allowed, self.http.request(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(RegistryError::Unreachable(error_chain(&e))),
            Err(_) => Err(RegistryError::TimedOut(what)),
        }
    }
}

/// The manifest: the empty config, the file as its one layer (titled with its name), and the
/// provenance as annotations. Its bytes are what the digest is of.
pub fn manifest(artifact: &Artifact<'_>) -> Vec<u8> {
    let mut layer_annotations = serde_json::Map::new();
    layer_annotations.insert(
        "org.opencontainers.image.title".into(),
        artifact.provenance.title().into(),
    );
    let annotations: serde_json::Map<String, serde_json::Value> = artifact
        .provenance
        .manifest_annotations()
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.into()))
        .collect();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {
            "mediaType": EMPTY_CONFIG_TYPE,
            "digest": sha256_digest(EMPTY_CONFIG),
            "size": EMPTY_CONFIG.len(),
            "data": "e30=",
        },
        "layers": [{
            "mediaType": artifact.media_type,
            "digest": format!("sha256:{}", artifact.sha256),
            "size": artifact.size,
            "annotations": layer_annotations,
        }],
        "annotations": annotations,
    });
    serde_json::to_vec(&manifest).expect("a JSON value serializes")
}

/// A URL's scheme, lowercased host and port (the scheme's own when none is written), as a
/// registry's `Location` and our configured address may spell the same place differently.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let port = uri.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some((scheme, uri.host()?.to_ascii_lowercase(), port))
}

pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The response if its status is the one expected; otherwise the registry's own words.
async fn expect(
    response: http::Response<hyper::body::Incoming>,
    expected: StatusCode,
    what: &'static str,
) -> Result<http::Response<hyper::body::Incoming>, RegistryError> {
    if response.status() == expected {
        return Ok(response);
    }
    let status = response.status();
    let body = tokio::time::timeout(ANSWER_TIMEOUT, response.into_body().collect())
        .await
        .ok()
        .and_then(Result::ok)
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Err(RegistryError::Refused {
        what,
        status,
        message: registry_message(&body),
    })
}

/// The spec's error body, `{"errors": [{"code", "message"}]}`, in a line.
fn registry_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: String,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Errors>(body) {
        Ok(errors) if !errors.errors.is_empty() => errors
            .errors
            .iter()
            .map(|e| format!("{} {}", e.code, e.message).trim().to_string())
            .collect::<Vec<_>>()
            .join("; "),
        _ if body.is_empty() => "no reason given".into(),
        _ => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

fn empty() -> Body {
    full(Bytes::new())
}

/// The file, read in pieces as the registry takes them.
fn read_in_chunks(
    path: PathBuf,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, std::io::Error>> + Send + Sync + 'static
{
    enum State {
        Closed(PathBuf),
        Open(tokio::fs::File),
        Done,
    }
    futures_util::stream::unfold(State::Closed(path), |state| async move {
        let mut file = match state {
            State::Done => return None,
            State::Open(file) => file,
            State::Closed(path) => match tokio::fs::File::open(&path).await {
                Ok(file) => file,
                Err(e) => return Some((Err(e), State::Done)),
            },
        };
        let mut buffer = BytesMut::with_capacity(CHUNK);
        match file.read_buf(&mut buffer).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(Frame::data(buffer.freeze())), State::Open(file))),
            Err(e) => Some((Err(e), State::Done)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_names_the_file_and_its_provenance() {
        let provenance = Provenance {
            user_name: "alice".into(),
            session_id: "s1".into(),
            image: "jupyterlab".into(),
            sha256: "ab".repeat(32),
            path: "models/m.onnx".into(),
            created: "2026-12-01T00:00:00Z".into(),
            approved_by: None,
        };
        let sha = "ab".repeat(32);
        let artifact = Artifact {
            repository: "sandbox/alice/m",
            tag: "v1",
            file: Path::new("/nonexistent"),
            size: 5,
            sha256: &sha,
            media_type: "application/onnx",
            provenance: &provenance,
        };
        let bytes = manifest(&artifact);
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["artifactType"], ARTIFACT_TYPE);
        assert_eq!(
            json["config"]["digest"],
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
            "the OCI empty descriptor"
        );
        assert_eq!(json["layers"][0]["digest"], format!("sha256:{sha}"));
        assert_eq!(
            json["layers"][0]["annotations"]["org.opencontainers.image.title"],
            "m.onnx"
        );
        assert_eq!(
            json["annotations"]["dev.gpu-sandbox.promotion.session"],
            "s1"
        );
        assert_eq!(
            manifest(&artifact),
            bytes,
            "the same manifest, byte for byte"
        );
    }

    #[test]
    fn registry_errors_read_as_a_line() {
        let body = br#"{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}"#;
        assert_eq!(
            registry_message(body),
            "DENIED requested access to the resource is denied"
        );
        assert_eq!(registry_message(b""), "no reason given");
        assert_eq!(registry_message(b"plain"), "plain");
    }

    #[test]
    fn credentials_go_to_the_registry_only() {
        let registry = Registry::new("http://127.0.0.1:5000", "u", "p").unwrap();
        let has = |url: &str| {
            registry
                .request(Method::PUT, url)
                .body(())
                .unwrap()
                .headers()
                .contains_key(header::AUTHORIZATION)
        };
        assert!(has("http://127.0.0.1:5000/v2/a/blobs/uploads/x"));
        assert!(!has("http://127.0.0.1:50000/v2/a/blobs/uploads/x"));
        assert!(!has("https://127.0.0.1:5000/v2/a/blobs/uploads/x"));
        assert!(!has("https://storage.example/upload?sig=1"));
        // The same place, spelt otherwise: the default port written or left out, capitals.
        let registry = Registry::new("https://Reg.Example:443", "u", "p").unwrap();
        assert!(
            registry
                .request(Method::PUT, "https://reg.example/v2/a/blobs/uploads/x")
                .body(())
                .unwrap()
                .headers()
                .contains_key(header::AUTHORIZATION)
        );
    }

    #[test]
    fn references_name_host_repository_and_digest() {
        let registry = Registry::new("http://127.0.0.1:5000/", "", "").unwrap();
        assert_eq!(
            registry.reference("a/b", "sha256:00"),
            "127.0.0.1:5000/a/b@sha256:00"
        );
    }
}
