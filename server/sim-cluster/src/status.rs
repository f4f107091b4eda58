//! Refusals as the API server words them: a `Status` object with the HTTP code, reason and message a
//! real one sends, which is what the product's client reads and shows.

use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A refused request.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details`: the object's name and kind where the refusal is about one.
    pub details: Option<(String, String)>,
}

impl Refusal {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn about(mut self, kind: &str, name: &str) -> Self {
        self.details = Some((kind.to_string(), name.to_string()));
        self
    }

    pub fn not_found(resource: &str, name: &str) -> Self {
        Refusal::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
    }

    pub fn already_exists(resource: &str, name: &str) -> Self {
        Refusal::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Refusal::new(400, "BadRequest", message)
    }

    /// 422: `Kind "name" is invalid: field: Invalid value: …`.
    pub fn invalid(kind: &str, name: &str, causes: &[String]) -> Self {
        let message = if causes.len() == 1 {
            format!("{kind} \"{name}\" is invalid: {}", causes[0])
        } else {
            format!("{kind} \"{name}\" is invalid: [{}]", causes.join(", "))
        };
        Refusal::new(422, "Invalid", message).about(kind, name)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Refusal::new(403, "Forbidden", message)
    }

    /// The `Status` body.
    pub fn body(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((kind, name)) = &self.details {
            status["details"] = json!({"name": name, "kind": kind.to_lowercase()});
        }
        status
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let code = http::StatusCode::from_u16(self.code).unwrap_or(http::StatusCode::BAD_REQUEST);
        (code, axum::Json(self.body())).into_response()
    }
}
