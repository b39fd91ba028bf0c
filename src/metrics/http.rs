//! The HTTP endpoint on `metrics.listen` (hyper's HTTP/1.1 server): `/metrics` (Prometheus),
//! `/healthz`, `/status` (the job's progress as JSON), `/` (a self-contained status page over
//! `/status`) and `POST /control` (pause, resume, change the rate limits or the replay speed).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info};

use super::control::{apply_control, ControlError, StatusBoard};
use super::Metrics;
use crate::error::{Error, Result};

/// The status page: inline CSS and script, no external assets.
const STATUS_PAGE: &str = include_str!("status_page.html");

/// The largest `POST /control` body read.
const MAX_BODY: usize = 64 * 1024;

/// What the endpoint serves.
pub struct Endpoint {
    pub metrics: Arc<Metrics>,
    pub status: Arc<StatusBoard>,
    /// `metrics.control`: whether `POST /control` may change anything.
    pub control: bool,
}

fn respond(status: StatusCode, kind: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    response
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Full<Bytes>> {
    respond(status, "application/json", format!("{value}\n"))
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json(status, &serde_json::json!({ "error": message }))
}

async fn route(endpoint: Arc<Endpoint>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    match (request.method(), path.as_str()) {
        (&Method::GET, "/metrics") => respond(StatusCode::OK, "text/plain; version=0.0.4", endpoint.metrics.render()),
        (&Method::GET, "/healthz") => respond(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/status") => json(StatusCode::OK, &endpoint.status.status()),
        (&Method::GET, "/") => respond(StatusCode::OK, "text/html; charset=utf-8", STATUS_PAGE),
        (&Method::POST, "/control") if !endpoint.control => error(
            StatusCode::FORBIDDEN,
            "control is switched off (metrics.control = false)",
        ),
        // a page of another site can POST text to a loopback port, but not JSON without asking
        // first (CORS), which this server never allows: so only JSON is taken
        (&Method::POST, "/control") if !is_json(&request) => error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the body as JSON, with Content-Type: application/json",
        ),
        (&Method::POST, "/control") => {
            let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => return error(StatusCode::BAD_REQUEST, &format!("reading the body: {e}")),
            };
            match apply_control(&endpoint.status, &body) {
                Ok(settings) => json(StatusCode::OK, &settings),
                Err(ControlError::Bad(m)) => error(StatusCode::BAD_REQUEST, &m),
                Err(ControlError::Unavailable(m)) => error(StatusCode::CONFLICT, &m),
            }
        }
        (_, "/control") => respond(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "POST only\n"),
        (&Method::GET, _) => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
        _ => respond(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n"),
    }
}

/// Whether the request says its body is JSON.
fn is_json(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"))
}

/// Serve the endpoint on `addr` until the task is dropped.
pub async fn serve(addr: SocketAddr, endpoint: Endpoint) -> Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("binding the metrics endpoint on {addr}"), e))?;
    let bound = listener.local_addr().unwrap_or(addr);
    info!(address = %bound, control = endpoint.control, "metrics endpoint listening (/metrics, /healthz, /status, /, POST /control)");
    let endpoint = Arc::new(endpoint);
    let sampler = Arc::clone(&endpoint.status);
    Ok(tokio::spawn(async move {
        // the rate /status reports: the records done, sampled
        let _sampling = tokio::spawn(async move { sampler.sample_forever().await });
        loop {
            let (socket, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // out of file descriptors, say: wait, rather than spin on the error
                    debug!(error = %e, "accepting a metrics client failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let endpoint = Arc::clone(&endpoint);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let endpoint = Arc::clone(&endpoint);
                    async move { Ok::<_, Infallible>(route(endpoint, request).await) }
                });
                // a client that sends no complete request within 10 s is let go (hyper has no
                // timeout without a timer)
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10))
                    .serve_connection(TokioIo::new(socket), service)
                    .await
                {
                    debug!(peer = %peer, error = %e, "metrics client went away");
                }
            });
        }
    }))
}
