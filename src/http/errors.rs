//! Error answers: every failure is a JSON `{code, message}` body with a fitting status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::validate::FieldError;

/// A failed request, ready to answer.
#[derive(Debug)]
pub enum ApiError {
    /// 400: the body is not JSON of the expected shape.
    Malformed(String),
    /// 413: the body is larger than `limits.max_body_bytes`.
    TooLarge(usize),
    /// 415: a content type other than JSON.
    UnsupportedMediaType(String),
    /// 422: parameters that fail validation, each named.
    InvalidParameters(Vec<FieldError>),
    /// 503: too many allocations at once, or one ran out of time.
    Unavailable(String),
    /// 408: the body arrived too slowly (see `limits.body_timeout_ms`); the connection is
    /// closed after the answer.
    BodyTimeout(String),
    /// 499 (nginx's "client closed request"): the client hung up before its body was
    /// whole. Nobody reads this answer; it is for the log and the metrics.
    ClientClosed(String),
    /// 500: our fault.
    Internal(String),
    /// 401: the configured bearer token is missing or wrong.
    Unauthorized,
    /// 409: a configuration reload was refused (the running one stays).
    ConfigRejected(String),
    /// 404
    NotFound(String),
    /// 405
    MethodNotAllowed(String),
}

/// The status of [`ApiError::ClientClosed`], as nginx logs it.
pub const CLIENT_CLOSED: u16 = 499;

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<&'a [FieldError]>,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Malformed(_) => StatusCode::BAD_REQUEST,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::InvalidParameters(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::ClientClosed(_) => StatusCode::from_u16(CLIENT_CLOSED).unwrap_or(StatusCode::BAD_REQUEST),
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::ConfigRejected(_) => StatusCode::CONFLICT,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Malformed(_) => "InvalidJson",
            ApiError::TooLarge(_) => "PayloadTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::InvalidParameters(_) => "InvalidParameters",
            ApiError::Unavailable(_) => "ServiceUnavailable",
            ApiError::BodyTimeout(_) => "RequestTimeout",
            ApiError::ClientClosed(_) => "ClientClosedRequest",
            ApiError::Internal(_) => "InternalError",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::ConfigRejected(_) => "InvalidConfig",
            ApiError::NotFound(_) => "ResourceNotFound",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
        }
    }

    pub fn message(&self) -> String {
        match self {
            ApiError::TooLarge(limit) => format!("request body is larger than the limit of {limit} bytes"),
            ApiError::InvalidParameters(_) => "Request parameters failed validation".into(),
            ApiError::Unauthorized => "a valid bearer token is required".into(),
            ApiError::Malformed(m)
            | ApiError::UnsupportedMediaType(m)
            | ApiError::Unavailable(m)
            | ApiError::BodyTimeout(m)
            | ApiError::ClientClosed(m)
            | ApiError::Internal(m)
            | ApiError::ConfigRejected(m)
            | ApiError::NotFound(m)
            | ApiError::MethodNotAllowed(m) => m.clone(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = self.message();
        let errors = match &self {
            ApiError::InvalidParameters(errors) => Some(errors.as_slice()),
            _ => None,
        };
        let body = crate::js::json::to_vec(&ErrorBody { code: self.code(), message: &message, errors })
            .unwrap_or_else(|_| br#"{"code":"InternalError","message":"error body"}"#.to_vec());
        let mut response = (self.status(), body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        match self {
            ApiError::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            // A client this slow is not waited for again: the rest of its body is not
            // drained, the connection closes after the answer.
            ApiError::BodyTimeout(_) => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response.extensions_mut().insert(super::Outcome::Failed(format!("{}: {message}", self.code())));
        response
    }
}
