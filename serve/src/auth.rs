//! Who may call what: the read token and the write token.
//!
//! * Reads (every route but `/healthz` and `/openapi.json`) need `Authorization: Bearer
//!   <token>` when a read token is set; the write token is accepted too.
//! * Writes (`points:upsert`, `points:delete`, `PUT` and `DELETE` of a map)
//!   are refused with 403 unless the server was started with a write token,
//!   and then need `Authorization: Bearer <write token>`, on loopback too.

use crate::api::{openapi, ApiError};
use axum::extract::Request;
use axum::http::{header, Method, StatusCode};

/// The tokens a server checks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tokens {
    /// Needed by every route but `/healthz`, if set.
    pub(crate) read: Option<String>,
    /// Needed by the write routes; `None`: writes are off.
    pub(crate) write: Option<String>,
}

/// Whether `req` is one of the write routes.
pub(crate) fn is_write(req: &Request) -> bool {
    let m = req.method();
    if m == Method::PUT || m == Method::DELETE {
        return true;
    }
    let p = req.uri().path();
    m == Method::POST && (p.ends_with("/points:upsert") || p.ends_with("/points:delete"))
}

/// Byte-wise comparison whose time does not depend on where they differ.
pub(crate) fn same_token(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn bearer(req: &Request) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

fn unauthorized_error(given: Option<&str>) -> ApiError {
    let msg = if given.is_some() {
        "wrong token"
    } else {
        "missing Authorization: Bearer token"
    };
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", msg).at("authorization")
}

/// Why `req` may not pass (see the module docs), or `None`.
pub(crate) fn refused(tokens: &Tokens, req: &Request) -> Option<ApiError> {
    let given = bearer(req);
    let matches = |t: &Option<String>| matches!((t, given), (Some(t), Some(g)) if same_token(g.as_bytes(), t.as_bytes()));
    if is_write(req) {
        return match &tokens.write {
            None => Some(ApiError::new(
                StatusCode::FORBIDDEN,
                "writes_disabled",
                "this server takes no writes (start it with a write token)",
            )),
            Some(_) if matches(&tokens.write) => None,
            Some(_) => Some(unauthorized_error(given)),
        };
    }
    let open = [openapi::HEALTHZ, openapi::OPENAPI];
    if tokens.read.is_none() || open.contains(&req.uri().path()) {
        return None;
    }
    if matches(&tokens.read) || matches(&tokens.write) {
        None
    } else {
        Some(unauthorized_error(given))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn req(method: Method, path: &str, token: Option<&str>) -> Request {
        let mut b = axum::http::Request::builder().method(method).uri(path);
        if let Some(t) = token {
            b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn token_compare() {
        assert!(same_token(b"abc", b"abc"));
        assert!(!same_token(b"abc", b"abd"));
        assert!(!same_token(b"abc", b"ab"));
    }

    #[test]
    fn writes_need_the_write_token_and_reads_take_either() {
        let t = Tokens {
            read: Some("r".into()),
            write: Some("w".into()),
        };
        let up = "/v1/maps/m/points:upsert";
        assert!(refused(&t, &req(Method::POST, up, Some("w"))).is_none());
        let e = refused(&t, &req(Method::POST, up, Some("r"))).unwrap();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert!(refused(&t, &req(Method::POST, up, None)).is_some());
        assert!(refused(&t, &req(Method::DELETE, "/v1/maps/m", Some("r"))).is_some());
        assert!(refused(&t, &req(Method::PUT, "/v1/maps/m", Some("w"))).is_none());
        let s = "/v1/maps/m/search";
        assert!(refused(&t, &req(Method::POST, s, Some("r"))).is_none());
        assert!(refused(&t, &req(Method::POST, s, Some("w"))).is_none());
        assert!(refused(&t, &req(Method::POST, s, Some("x"))).is_some());
        assert!(refused(&t, &req(Method::GET, "/healthz", None)).is_none());
    }

    #[test]
    fn without_a_write_token_writes_are_forbidden_even_on_loopback() {
        let t = Tokens::default();
        let e = refused(&t, &req(Method::POST, "/v1/maps/m/points:delete", None)).unwrap();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert_eq!(e.code, "writes_disabled");
        assert!(refused(&t, &req(Method::POST, "/v1/maps/m/search", None)).is_none());
        let t = Tokens {
            read: None,
            write: Some("w".into()),
        };
        assert!(refused(&t, &req(Method::POST, "/v1/maps/m/points:delete", None)).is_some());
        assert!(refused(&t, &req(Method::POST, "/v1/maps/m/search", None)).is_none());
    }
}
