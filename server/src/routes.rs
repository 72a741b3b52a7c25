//! The router: every endpoint's path ([`crate::http`]'s generation
//! endpoints, [`crate::endpoints`]' others), a 404 for the rest, and the
//! layers over them all (the body limit, CORS).

use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::error::ApiError;
use crate::extract::BODY_LIMIT;
use crate::state::Shared;

/// The router of every endpoint.
pub fn router(state: Shared) -> Router {
    crate::endpoints::routes(crate::http::routes(Router::new()))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(crate::cors::cors))
        .with_state(state)
}

async fn not_found() -> Response {
    ApiError::not_found().into_response()
}
