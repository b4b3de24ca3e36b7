//! [`ApiError`]: every rejection, answered as a JSON body naming the field
//! at fault.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answered as `{"error": {"code", "field", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (`invalid_field`, `unknown_map`, ...).
    pub code: &'static str,
    /// The request field at fault, if any.
    pub field: Option<String>,
    /// Human-readable detail.
    pub message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
    message: &'a str,
}

impl ApiError {
    /// A 400 naming `field`.
    pub fn field(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_field",
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// Any status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            field: None,
            message: message.into(),
        }
    }

    /// The same error naming `field`.
    pub fn at(mut self, field: &str) -> ApiError {
        self.field = Some(field.to_string());
        self
    }

    /// 404 for a map name that is not served.
    pub fn unknown_map(name: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_map",
            format!("no map is served under {name:?}"),
        )
        .at("name")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&ErrorBody {
            error: ErrorDetail {
                code: self.code,
                field: self.field.as_deref(),
                message: &self.message,
            },
        })
        .unwrap_or_default();
        let mut r = (self.status, body).into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}
