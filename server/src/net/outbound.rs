//! The HTTP(S) client for what the server itself calls: the OpenID Connect provider and the
//! production registry. HTTPS is checked against the system's trusted roots.

use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

pub type HttpsClient<B> = Client<hyper_rustls::HttpsConnector<HttpConnector>, B>;

/// A client over HTTP/1.1, for HTTPS or plain HTTP (a provider or registry on loopback).
pub fn https_client<B>() -> Result<HttpsClient<B>, String>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| format!("reading the system's trusted certificates: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new()).build(https))
}
