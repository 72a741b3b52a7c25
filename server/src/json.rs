//! A request body's JSON as the handlers read it: the body as one object
//! (else a 400 naming what it is), and the JSON type names the 400s of
//! every field check say ("'x' must be a string, not a number").

use serde_json::{Map, Value};

use crate::error::ApiError;

/// The JSON object of a body, or 400.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_request(format!(
            "request body must be a JSON object, not {}",
            type_name(&other)
        ))),
    }
}

/// The JSON type of a value, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
