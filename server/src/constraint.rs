//! Constrained decoding: a request's `grammar` (llama.cpp's GBNF),
//! `json_schema` or `response_format`, compiled by `llguidance` against the
//! model's vocabulary, masks each step's logits to the tokens the
//! constraint allows.
//!
//! - [`parse_constraint`]: the request's fields to a [`ConstraintSpec`]
//!   (llama.cpp's rules: `grammar` and `json_schema` exclude each other;
//!   `response_format` is `text`, `json_object` (with an optional
//!   `schema`) or `json_schema` (`{"json_schema": {"schema": ...}}`)).
//! - [`Grammars::compile`]: a spec to a [`Constraint`], or a 400 naming
//!   what cannot be used. [`from_request`] does both.
//! - [`Constraint::mask_logits`] before sampling, [`Constraint::commit`]
//!   after: the per-token API the decode loop calls.
//!
//! Why llguidance: it is the constrained-decoding library llama.cpp itself
//! can use, maintained, with JSON Schema compiled natively (no GBNF
//! detour), an Earley parser that takes any context-free grammar (left
//! recursion included) and a token trie that computes a mask in well under
//! a millisecond for most steps. GBNF reaches it through [`crate::gbnf`];
//! a grammar that starts with `%llguidance` is taken as Lark as is, as
//! llama.cpp does when built with llguidance. JSON is written compactly
//! (`", "` and `": "` separators, no free whitespace) unless the schema
//! says otherwise in llguidance's `x-guidance` key, so a model cannot pad
//! its answer with whitespace until it runs out of tokens.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use llama::Model;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokenId};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::gbnf::gbnf_to_lark;
use crate::json::type_name;
use crate::token_env::LlamaTokEnv;

/// What a request asks its output to match.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintSpec {
    /// A GBNF grammar (`grammar`).
    Gbnf(String),
    /// A Lark grammar in llguidance's syntax (`grammar` starting with `%llguidance`).
    Lark(String),
    /// A JSON schema (`json_schema`, `response_format`).
    JsonSchema(Value),
}

impl ConstraintSpec {
    /// The request field it came from, for messages.
    fn field(&self) -> &'static str {
        match self {
            ConstraintSpec::Gbnf(_) | ConstraintSpec::Lark(_) => "grammar",
            ConstraintSpec::JsonSchema(_) => "json_schema",
        }
    }
}

fn schema_of(v: Option<&Value>, key: &str) -> Result<Value, ApiError> {
    match v {
        // no schema: any JSON value, as llama.cpp
        None | Some(Value::Null) => Ok(json!({})),
        Some(v @ (Value::Object(_) | Value::Bool(_))) => Ok(v.clone()),
        Some(v) => Err(ApiError::bad_request(format!(
            "'{key}' must be a JSON schema (an object), not {}",
            type_name(v)
        ))),
    }
}

/// The constraint a request's `grammar`, `json_schema` and
/// `response_format` fields ask for (`None`: unconstrained), or a 400
/// naming the field that is wrong.
pub fn parse_constraint(m: &Map<String, Value>) -> Result<Option<ConstraintSpec>, ApiError> {
    let grammar = match m.get("grammar") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'grammar' must be a string (a GBNF grammar), not {}",
                type_name(v)
            )))
        }
    };
    let mut schema = match m.get("json_schema") {
        None | Some(Value::Null) => None,
        v => Some(schema_of(v, "json_schema")?),
    };
    match m.get("response_format") {
        None | Some(Value::Null) => {}
        Some(Value::Object(rf)) => {
            let ty = match rf.get("type") {
                None | Some(Value::Null) => "text",
                Some(Value::String(s)) => s.as_str(),
                Some(v) => {
                    return Err(ApiError::bad_request(format!(
                        "'response_format.type' must be a string, not {}",
                        type_name(v)
                    )))
                }
            };
            match ty {
                "text" => {}
                "json_object" => {
                    schema = Some(match rf.get("schema") {
                        None | Some(Value::Null) => json!({"type": "object"}),
                        v => schema_of(v, "response_format.schema")?,
                    })
                }
                "json_schema" => {
                    let inner = match rf.get("json_schema") {
                        None | Some(Value::Null) => None,
                        Some(Value::Object(o)) => o.get("schema"),
                        Some(v) => {
                            return Err(ApiError::bad_request(format!(
                                "'response_format.json_schema' must be an object, not {}",
                                type_name(v)
                            )))
                        }
                    };
                    schema = Some(schema_of(inner, "response_format.json_schema.schema")?);
                }
                other => {
                    return Err(ApiError::bad_request(format!(
                        "'response_format.type' must be one of \"text\", \"json_object\" or \"json_schema\", not \"{other}\""
                    )))
                }
            }
        }
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'response_format' must be an object, not {}",
                type_name(v)
            )))
        }
    }
    match (grammar, schema) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "either 'json_schema' (or 'response_format') or 'grammar' can be given, not both",
        )),
        (Some(g), None) if g.trim_start().starts_with("%llguidance") => {
            Ok(Some(ConstraintSpec::Lark(g)))
        }
        (Some(g), None) => Ok(Some(ConstraintSpec::Gbnf(g))),
        (None, Some(s)) => Ok(Some(ConstraintSpec::JsonSchema(s))),
        (None, None) => Ok(None),
    }
}

/// Compiles constraints against one model's vocabulary (built once: the
/// token trie and llguidance's token-set slices).
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    /// The compiler for `model`'s vocabulary.
    pub fn new(model: Arc<Model>) -> anyhow::Result<Grammars> {
        let env: TokEnv = Arc::new(LlamaTokEnv::new(model));
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| anyhow::anyhow!("cannot index the vocabulary for grammars: {e}"))?;
        factory.quiet();
        Ok(Grammars { factory })
    }

    /// A fresh [`Constraint`] for `spec`, or a 400 naming the problem.
    pub fn compile(&self, spec: &ConstraintSpec) -> Result<Constraint, ApiError> {
        let field = spec.field();
        let bad = |msg: String| ApiError::bad_request(format!("'{field}' cannot be used: {msg}"));
        let top = match spec {
            ConstraintSpec::Gbnf(g) => TopLevelGrammar::from_lark(gbnf_to_lark(g).map_err(bad)?),
            ConstraintSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
            ConstraintSpec::JsonSchema(s) => {
                TopLevelGrammar::from_json_schema(llguidance_schema(s))
            }
        };
        // llguidance reports errors as values; a panic in it must not take
        // the request's handler down with it either
        let parser = catch_unwind(AssertUnwindSafe(|| self.factory.create_parser(top)))
            .map_err(|_| bad("the grammar compiler failed on it".into()))?
            .map_err(|e| bad(first_line(&e.to_string())))?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(bad(first_line(&e)));
        }
        // the first mask, computed now: a grammar past llguidance's limits
        // (e.g. long repetitions of one character) is a 400 here rather
        // than a failed generation (the parser keeps no state from it)
        let first = catch_unwind(AssertUnwindSafe(|| matcher.compute_mask_or_eos()))
            .map_err(|_| bad("the grammar engine failed on it".into()))?;
        match first {
            Ok(m) if m.is_zero() => return Err(bad("it allows no token at all".into())),
            Ok(_) => {}
            Err(e) => return Err(bad(first_line(&e.to_string()))),
        }
        Ok(Constraint {
            spec: spec.clone(),
            matcher: Mutex::new(matcher),
        })
    }
}

/// `schema` as llguidance is given it: read as llama.cpp reads schemas
/// ([`llama_cpp_schema`]) and written compactly (`", "` and `": "`, no free
/// whitespace: llguidance's `x-guidance` options) unless it sets its own
/// `x-guidance`. For `json_schema` requests and the `%json` parts of the
/// tool-call grammars ([`crate::tools::required_call`]).
pub(crate) fn llguidance_schema(schema: &Value) -> Value {
    let mut s = schema.clone();
    llama_cpp_schema(&mut s);
    if let Value::Object(o) = &mut s {
        o.entry("x-guidance").or_insert_with(
            || json!({"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": false}),
        );
    }
    s
}

/// llama.cpp's reading of a schema (its `json_schema_to_grammar`), where
/// it differs from JSON Schema's, applied to every subschema:
/// - an object schema with `properties` and no `additionalProperties`
///   allows only the listed properties (JSON Schema would allow others);
/// - a schema without `type` but with `items` / `prefixItems` is an array,
///   with `properties` an object (JSON Schema would allow any type);
/// - `items` as an array (draft 4's tuples) is exactly those items, in
///   order (`prefixItems` and no further items).
fn llama_cpp_schema(schema: &mut Value) {
    let Value::Object(o) = schema else { return };
    if !o.contains_key("type") && !o.contains_key("$ref") {
        let ty = if o.contains_key("items") || o.contains_key("prefixItems") {
            Some("array")
        } else if o.contains_key("properties") {
            Some("object")
        } else {
            None
        };
        if let Some(t) = ty {
            o.insert("type".into(), Value::String(t.into()));
        }
    }
    if o.get("items").is_some_and(Value::is_array) && !o.contains_key("prefixItems") {
        if let Some(tuple) = o.remove("items") {
            o.insert("prefixItems".into(), tuple);
            o.insert("items".into(), Value::Bool(false));
            o.remove("additionalItems");
        }
    }
    if o.get("properties").is_some_and(Value::is_object) && !o.contains_key("additionalProperties")
    {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (k, v) in o.iter_mut() {
        match (k.as_str(), v) {
            (
                "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas",
                Value::Object(m),
            ) => m.values_mut().for_each(llama_cpp_schema),
            ("items" | "prefixItems" | "anyOf" | "oneOf" | "allOf", Value::Array(a)) => {
                a.iter_mut().for_each(llama_cpp_schema)
            }
            (
                "items"
                | "additionalProperties"
                | "additionalItems"
                | "not"
                | "if"
                | "then"
                | "else"
                | "contains"
                | "propertyNames"
                | "unevaluatedProperties"
                | "unevaluatedItems",
                v,
            ) => llama_cpp_schema(v),
            _ => {}
        }
    }
}

/// An error message without llguidance's source excerpt (kept short for a
/// JSON error; the excerpt follows the first line).
fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).trim().to_string()
}

/// The constraint of a request ([`parse_constraint`] then
/// [`Grammars::compile`]): `None` when it asks for none.
pub fn from_request(
    grammars: &Grammars,
    m: &Map<String, Value>,
) -> Result<Option<Constraint>, ApiError> {
    match parse_constraint(m)? {
        Some(spec) => grammars.compile(&spec).map(Some),
        None => Ok(None),
    }
}

/// One generation's constraint state: where in the grammar the tokens
/// generated so far have led.
pub struct Constraint {
    spec: ConstraintSpec,
    // a Mutex only to make the state Sync (it moves between threads with
    // the request); every use has `&mut self` and does not lock
    matcher: Mutex<Matcher>,
}

impl Constraint {
    fn matcher(&mut self) -> &mut Matcher {
        self.matcher.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    /// The request's constraint.
    pub fn spec(&self) -> &ConstraintSpec {
        &self.spec
    }

    /// `logits` with every token the constraint does not allow next set
    /// to minus infinity; an error when none is allowed (the grammar is
    /// stuck) or the grammar engine failed.
    pub fn mask_logits(&mut self, logits: &[f32]) -> Result<Vec<f32>, String> {
        let m = self.matcher();
        let mask = m
            .compute_mask_or_eos()
            .map_err(|e| format!("grammar error: {}", first_line(&e.to_string())))?;
        let mut out = logits.to_vec();
        let mut any = false;
        for (i, l) in out.iter_mut().enumerate() {
            if mask.is_allowed(i as TokenId) {
                any = any || l.is_finite() || *l == f32::INFINITY;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        if !any {
            return Err("the grammar allows no token here".into());
        }
        Ok(out)
    }

    /// Advance past the sampled token `tok`; an error when the constraint
    /// does not allow it.
    pub fn commit(&mut self, tok: i32) -> Result<(), String> {
        let m = self.matcher();
        m.consume_token(tok as TokenId)
            .map_err(|e| format!("grammar error: {}", first_line(&e.to_string())))
    }

    /// Whether the constraint is complete and allows nothing more (only
    /// the end of generation).
    pub fn is_finished(&mut self) -> bool {
        self.matcher().is_stopped()
    }
}

impl Clone for Constraint {
    /// An independent copy of the state (each choice of a request of
    /// several advances its own).
    fn clone(&self) -> Self {
        let m = self.matcher.lock().unwrap_or_else(|p| p.into_inner());
        Constraint {
            spec: self.spec.clone(),
            matcher: Mutex::new(m.deep_clone()),
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Constraint {
    /// Two constraints are equal when they were compiled from the same spec.
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn fields_to_specs() {
        let p = |v: Value| parse_constraint(&obj(v));
        assert_eq!(p(json!({})).unwrap(), None);
        assert_eq!(
            p(json!({"grammar": "root ::= \"a\""})).unwrap(),
            Some(ConstraintSpec::Gbnf("root ::= \"a\"".into()))
        );
        assert_eq!(
            p(json!({"json_schema": {"const": "42"}})).unwrap(),
            Some(ConstraintSpec::JsonSchema(json!({"const": "42"})))
        );
        assert_eq!(
            p(json!({"response_format": {"type": "json_object"}})).unwrap(),
            Some(ConstraintSpec::JsonSchema(json!({"type": "object"})))
        );
        assert_eq!(
            p(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}}}}))
                .unwrap(),
            Some(ConstraintSpec::JsonSchema(json!({"type": "integer"})))
        );
        assert_eq!(
            p(json!({"response_format": {"type": "text"}})).unwrap(),
            None
        );
    }

    #[test]
    fn schemas_are_read_as_llama_cpp_reads_them() {
        let mut s = json!({
            "type": "object",
            "properties": {"a": {"type": "object", "properties": {"properties": {"type": "integer"}}}},
            "$defs": {"d": {"properties": {}, "additionalProperties": true}},
            "anyOf": [{"properties": {"x": {}}}],
        });
        llama_cpp_schema(&mut s);
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["properties"]["a"]["additionalProperties"], json!(false));
        // a property named "properties" is not a schema keyword
        assert_eq!(
            s["properties"]["a"]["properties"]["properties"],
            json!({"type": "integer"})
        );
        assert_eq!(s["$defs"]["d"]["additionalProperties"], json!(true));
        assert_eq!(s["anyOf"][0]["additionalProperties"], json!(false));
        assert_eq!(s["anyOf"][0]["type"], json!("object"));
        let mut t = json!({"items": [{"type": "integer"}], "additionalItems": true});
        llama_cpp_schema(&mut t);
        assert_eq!(
            t,
            json!({"type": "array", "prefixItems": [{"type": "integer"}], "items": false})
        );
    }

    #[test]
    fn bad_fields_name_themselves() {
        let e = |v: Value| parse_constraint(&obj(v)).unwrap_err().message;
        assert!(e(json!({"response_format": {"type": "sound"}})).contains("\"sound\""));
        assert!(
            e(json!({"response_format": {"type": "json_object", "schema": 123}}))
                .contains("'response_format.schema' must be a JSON schema")
        );
        assert!(e(json!({"grammar": 5})).contains("'grammar' must be a string"));
        assert!(e(json!({"grammar": "root ::= \"a\"", "json_schema": {}})).contains("not both"));
        assert!(
            e(json!({"response_format": "json"})).contains("'response_format' must be an object")
        );
    }
}
