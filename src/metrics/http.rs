//! The HTTP endpoint on `metrics.listen` (hyper's HTTP/1.1 server): `/metrics` (Prometheus),
//! `/healthz` and `/ping` (alive), `/ready` (the job runs), `/status` (the job's progress as
//! JSON), `/` (a self-contained status page over `/status`) and `POST /control` (pause, resume,
//! change the rate limits or the replay speed), behind the [`Guard`]: one request per
//! connection, each read within a deadline, and a cap on connections at once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tracing::{debug, info, warn};

use super::control::{apply_control, ControlError, StatusBoard};
use super::guard::{Guard, Refusal};
use super::settings::MetricsConfig;
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
    /// The session's stop signal: not ready once it is given.
    pub stop: watch::Receiver<bool>,
    pub limits: Limits,
}

/// How much one client may hold of the endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request's headers and body arrive within this, or it gets 408 (or the connection is
    /// closed); the whole exchange ends within three times this.
    pub request_timeout: Duration,
    /// Connections served at once; past it, up to four times as many more get the probes
    /// (`/healthz`, `/ping`, `/ready`) within a second and 503 for anything else; more are closed.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_timeout: Duration::from_secs(10),
            max_connections: 64,
        }
    }
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

fn refused(refusal: Refusal) -> Response<Full<Bytes>> {
    let mut response = error(refusal.status(), &refusal.message());
    if refusal.status() == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

async fn route(endpoint: Arc<Endpoint>, guard: Arc<Guard>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    // liveness and readiness reveal nothing: probes reach them by any name
    match (request.method(), path.as_str()) {
        (&Method::GET, "/healthz") => return respond(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/ping") => return respond(StatusCode::OK, "text/plain", "pong\n"),
        (&Method::GET, "/ready") => {
            return if endpoint.status.running() && !*endpoint.stop.borrow() {
                respond(StatusCode::OK, "text/plain", "ready\n")
            } else {
                respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "not ready\n")
            };
        }
        _ => {}
    }
    if let Err(refusal) = guard.check_host(request.headers()) {
        return refused(refusal);
    }
    match (request.method(), path.as_str()) {
        (&Method::GET, "/metrics") => respond(StatusCode::OK, "text/plain; version=0.0.4", endpoint.metrics.render()),
        (&Method::GET, "/status") => json(StatusCode::OK, &endpoint.status.status()),
        (&Method::GET, "/") => respond(StatusCode::OK, "text/html; charset=utf-8", STATUS_PAGE),
        (&Method::POST, "/control") => control(&endpoint, &guard, request).await,
        (_, "/control") => respond(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "POST only\n"),
        (&Method::GET, _) => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
        _ => respond(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n"),
    }
}

/// `POST /control`, its host already checked.
async fn control(endpoint: &Endpoint, guard: &Guard, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if !endpoint.control {
        return error(
            StatusCode::FORBIDDEN,
            "control is switched off (metrics.control = false)",
        );
    }
    if let Err(refusal) = guard
        .check_origin(request.headers())
        .and_then(|()| guard.check_token(request.headers()))
    {
        warn!(reason = %refusal.message(), "POST /control refused");
        return refused(refusal);
    }
    // a page of another site can POST text without asking first, but not JSON (CORS, which this
    // server never allows): so only JSON is taken, whatever the Origin said
    if !is_json(&request) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the body as JSON, with Content-Type: application/json",
        );
    }
    let read = Limited::new(request.into_body(), MAX_BODY).collect();
    let body = match tokio::time::timeout(endpoint.limits.request_timeout, read).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, &format!("reading the body: {e}")),
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                &format!("the body did not arrive within {:?}", endpoint.limits.request_timeout),
            )
        }
    };
    match apply_control(&endpoint.status, &body) {
        Ok(settings) => json(StatusCode::OK, &settings),
        Err(ControlError::Bad(m)) => error(StatusCode::BAD_REQUEST, &m),
        Err(ControlError::Unavailable(m)) => error(StatusCode::CONFLICT, &m),
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
pub async fn serve(
    config: &MetricsConfig,
    addr: SocketAddr,
    endpoint: Endpoint,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("binding the metrics endpoint on {addr}"), e))?;
    Ok(serve_on(listener, config, endpoint))
}

/// Serve the endpoint on a bound `listener`.
fn serve_on(listener: TcpListener, config: &MetricsConfig, endpoint: Endpoint) -> tokio::task::JoinHandle<()> {
    let bound = match listener.local_addr() {
        Ok(bound) => bound,
        // a listener that cannot say its address still answers to its loopback names
        Err(_) => SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let guard = Arc::new(Guard {
        bound,
        allowed: config.allowed_hosts.clone(),
        token: config.control_token.clone(),
    });
    info!(
        address = %bound,
        control = endpoint.control,
        control_token = guard.token.is_some(),
        "metrics endpoint listening (/metrics, /healthz, /ping, /ready, /status, /, POST /control)"
    );
    let endpoint = Arc::new(endpoint);
    let sampler = Arc::clone(&endpoint.status);
    tokio::spawn(async move {
        // the rate /status reports: the records done, sampled
        let _sampling = tokio::spawn(async move { sampler.sample_forever().await });
        let slots = Arc::new(Semaphore::new(endpoint.limits.max_connections));
        // past the cap, probes are still answered (a liveness probe must not fail because
        // clients hold every slot), each within a second, up to this many at once
        let spare = Arc::new(Semaphore::new(endpoint.limits.max_connections * 4));
        loop {
            let (socket, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // out of file descriptors, say: wait, rather than spin on the error
                    debug!(error = %e, "accepting a metrics client failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (slot, probes_only, timeout) = match Arc::clone(&slots).try_acquire_owned() {
                Ok(slot) => (slot, false, endpoint.limits.request_timeout),
                Err(_) => match Arc::clone(&spare).try_acquire_owned() {
                    Ok(slot) => {
                        debug!(peer = %peer, "too many metrics clients at once; this one gets the probes only");
                        (slot, true, Duration::from_secs(1))
                    }
                    Err(_) => {
                        debug!(peer = %peer, "too many metrics clients at once; one closed");
                        continue;
                    }
                },
            };
            let endpoint = Arc::clone(&endpoint);
            let guard = Arc::clone(&guard);
            tokio::spawn(async move {
                let _slot = slot;
                let service = hyper::service::service_fn(move |request| {
                    let (endpoint, guard) = (Arc::clone(&endpoint), Arc::clone(&guard));
                    async move {
                        Ok::<_, Infallible>(if probes_only && !is_probe(&request) {
                            error(StatusCode::SERVICE_UNAVAILABLE, "too many connections at once")
                        } else {
                            route(endpoint, guard, request).await
                        })
                    }
                });
                // one request per connection, its headers within the timeout (hyper has no
                // timeout without a timer), its body within it too (408), and the whole
                // exchange within three times that
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(timeout)
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(socket), service);
                match tokio::time::timeout(timeout * 3, connection).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => debug!(peer = %peer, error = %e, "metrics client went away"),
                    Err(_) => debug!(peer = %peer, "metrics client too slow; connection closed"),
                }
            });
        }
    })
}

/// `/healthz`, `/ping` or `/ready`: what a probe asks, answered past the connection cap.
fn is_probe(request: &Request<Incoming>) -> bool {
    request.method() == Method::GET && matches!(request.uri().path(), "/healthz" | "/ping" | "/ready")
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
