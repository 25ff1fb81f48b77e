//! Who may call the API, checked in this order before a route runs: a CORS preflight is answered
//! here (as browsers send it, without a token); a request whose `Origin` is present and not
//! allowed is refused `403`; one without a configured bearer token `401`; a `POST` with a body
//! that is not `application/json` `415` (a browser sends JSON cross-origin only after a
//! preflight, so a page elsewhere cannot make a "simple" request run). Health probes
//! (`/healthz`) pass without a token. Every answer is counted by route and status, and every
//! refusal by its reason (`rust_stream.http.refused`).

use std::sync::Arc;

use axum::body::HttpBody;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::error::refusal;

/// The origins and tokens a server accepts.
#[derive(Debug, Clone, Default)]
pub(super) struct Access {
    /// Origins browsers may call from; `*` allows any.
    pub(super) origins: Vec<String>,
    /// SHA-256 digests of the bearer tokens accepted (empty: none required). Digests, so a
    /// token is compared in constant time whatever its length and never kept in the clear.
    pub(super) tokens: Vec<[u8; 32]>,
}

impl Access {
    /// A token's digest, as [`tokens`](Self::tokens) keeps it.
    pub(super) fn digest(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        self.origins
            .iter()
            .any(|allowed| allowed == "*" || allowed == origin)
    }

    /// Whether the request carries one of the tokens (always, when none is configured).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        if self.tokens.is_empty() {
            return true;
        }
        let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "))
            })
        else {
            return false;
        };
        let presented = Self::digest(token.trim());
        // Every token is compared, each byte by byte, so the time taken says nothing of which
        // token or how much of it matched.
        self.tokens.iter().fold(false, |found, known| {
            let differ = known
                .iter()
                .zip(presented.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            found | (differ == 0)
        })
    }
}

/// Whether a request carries a body (so its content type matters): any whose size is not known
/// to be 0 (hyper's body knows a `content-length`; one sent in chunks may hold anything).
fn has_body(request: &Request) -> bool {
    request.body().size_hint().upper() != Some(0)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The routes that answer without a token or an allowed origin: the health probe.
const OPEN_ROUTES: [&str; 1] = ["/healthz"];

/// Checks who is calling (see [the module](self)), answers CORS, and counts the answer.
pub(super) async fn guard(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|origin| origin.to_str().ok())
        .map(str::to_owned);
    let allowed = origin
        .as_deref()
        .filter(|origin| access.origin_allowed(origin))
        .and_then(|origin| HeaderValue::from_str(origin).ok());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let open = OPEN_ROUTES.contains(&route.as_str());
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let refused = if preflight || open {
        None
    } else if origin.is_some() && allowed.is_none() {
        Some((
            StatusCode::FORBIDDEN,
            "origin",
            format!(
                "origin `{}` is not allowed to call this API: add it to ALLOWED_ORIGINS \
                 (QueueApi::allowed_origins), or call from a server, which sends no Origin",
                origin.as_deref().unwrap_or_default()
            ),
        ))
    } else if !access.authorized(request.headers()) {
        Some((
            StatusCode::UNAUTHORIZED,
            "token",
            "no valid bearer token: send `authorization: Bearer <token>` with one of the \
             server's API_TOKENS"
                .to_owned(),
        ))
    } else if request.method() == Method::POST && has_body(&request) && !is_json(request.headers())
    {
        Some((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content_type",
            "a POST with a body takes `content-type: application/json` only".to_owned(),
        ))
    } else {
        None
    };
    let mut response = if preflight {
        let mut response = StatusCode::NO_CONTENT.into_response();
        if allowed.is_some() {
            let headers = response.headers_mut();
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST, OPTIONS"),
            );
            let asked = request
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .cloned()
                .unwrap_or_else(|| HeaderValue::from_static("content-type"));
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
            headers.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        }
        response
    } else if let Some((status, reason, why)) = refused {
        crate::metrics::http_refused(reason);
        tracing::debug!(http.route = %route, reason, "queue API request refused");
        let mut response = refusal(status, None, &why);
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    if let Some(origin) = allowed {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    if !access.origins.is_empty() {
        headers.append(header::VARY, HeaderValue::from_static("origin"));
    }
    crate::metrics::http_request(route, response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_configured_token_is_accepted_and_nothing_else() {
        let access = Access {
            origins: Vec::new(),
            tokens: vec![Access::digest("old-token"), Access::digest("new-token")],
        };
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            headers
        };
        assert!(access.authorized(&with("Bearer old-token")));
        assert!(access.authorized(&with("Bearer new-token")));
        assert!(!access.authorized(&with("Bearer new-toke")));
        assert!(!access.authorized(&with("new-token")));
        assert!(!access.authorized(&HeaderMap::new()));
        assert!(Access::default().authorized(&HeaderMap::new()));
    }
}
