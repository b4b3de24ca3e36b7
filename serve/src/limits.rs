//! Request checks that run before a request is admitted: the `Host`
//! allowlist (against DNS rebinding), the POST content type (against
//! cross-origin "simple" requests), and reading the body within a deadline
//! so only requests whose body has fully arrived count as in flight.

use crate::api::ApiError;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use std::time::Duration;

/// Host names every server accepts: the loopback names.
pub(crate) const LOOPBACK_HOSTS: [&str; 4] = ["localhost", "127.0.0.1", "::1", "[::1]"];

/// The host part of a `Host` header value (port and IPv6 brackets'
/// trailing port removed), lower-cased.
fn host_name(value: &str) -> String {
    let v = value.trim();
    let host = if let Some(rest) = v.strip_prefix('[') {
        // [v6]:port -> [v6]
        match rest.find(']') {
            Some(end) => &v[..end + 2],
            None => v,
        }
    } else {
        match v.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => v,
        }
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Why `req`'s `Host` is refused: it names neither a loopback name nor an
/// entry of `allowed` (`*` allows any). A request without `Host` (HTTP/1.0)
/// passes: a browser always sends one.
pub(crate) fn host_refused(allowed: &[String], req: &Request) -> Option<ApiError> {
    let value = req.headers().get(header::HOST)?;
    let Ok(value) = value.to_str() else {
        return Some(bad_host("the Host header is not ASCII"));
    };
    let name = host_name(value);
    let ok = LOOPBACK_HOSTS.contains(&name.as_str())
        || allowed.iter().any(|a| a == "*" || host_name(a) == name);
    (!ok).then(|| {
        bad_host(&format!(
            "host {name:?} is not served here (see --allow-host)"
        ))
    })
}

fn bad_host(msg: &str) -> ApiError {
    ApiError::new(StatusCode::MISDIRECTED_REQUEST, "host_not_allowed", msg).at("host")
}

/// Why a POST's content type is refused: only `application/json` and
/// `application/octet-stream` are accepted (parameters such as `charset`
/// allowed), so a web page cannot send a body without a CORS preflight.
pub(crate) fn content_type_refused(req: &Request) -> Option<ApiError> {
    if req.method() != Method::POST && req.method() != Method::PUT {
        return None;
    }
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json")
        || essence.eq_ignore_ascii_case("application/octet-stream")
    {
        return None;
    }
    Some(
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "POST and PUT bodies must be sent with Content-Type: application/json",
        )
        .at("content-type"),
    )
}

/// Whether the request's body is `application/octet-stream` (parameters
/// allowed).
pub(crate) fn is_octet_stream(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/octet-stream"))
}

/// Reads the whole body of `req` (at most `max` bytes) within `timeout`
/// and returns the request with the body in memory.
pub(crate) async fn read_body(
    req: Request,
    timeout: Duration,
    max: usize,
) -> Result<Request, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large(max));
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, max)).await {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Ok(Err(e)) => {
            // axum reports the limit only through its message.
            Err(if e.to_string().contains("length limit") {
                too_large(max)
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                    format!("the body could not be read: {e}"),
                )
                .at("body")
            })
        }
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!("the body did not arrive within {} ms", timeout.as_millis()),
        )
        .at("body")),
    }
}

fn too_large(max: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the body is larger than {max} bytes"),
    )
    .at("body")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("LocalHost:8080"), "localhost");
        assert_eq!(host_name("[::1]:80"), "[::1]");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_name("evil.example."), "evil.example");
    }
}
