//! The registry's web API through kiln-http, the client of every kiln
//! request: http(s) only, no redirects (a registry's API answers where it is
//! asked; a token never follows a redirect), bounded time and size.

use anyhow::{Context, Result};
pub use kiln_http::Response;

const USER_AGENT: &str = concat!("kiln-publish/", env!("CARGO_PKG_VERSION"), " (", kiln_package::repository!(), ")");

/// The most an index file or an API answer may be.
const ANSWER_CAP: u64 = 64 << 20;

fn client() -> &'static kiln_http::Client {
    static CLIENT: std::sync::OnceLock<kiln_http::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        let mut options = kiln_http::Options::new(USER_AGENT);
        options.total = std::time::Duration::from_secs(600);
        kiln_http::Client::new(options)
    })
}

/// A registry token (from `from`, named in the message) that holds no control character.
pub fn check_token(token: &str, from: &str) -> Result<()> {
    if let Some(c) = token.chars().find(|c| c.is_control()) {
        anyhow::bail!(
            "the registry token from {from} holds a control character (U+{:04X}); it is not used. Set it again \
             without line breaks or other control characters (`cargo login --registry NAME` writes it cleanly).",
            c as u32
        );
    }
    Ok(())
}

fn auth(token: Option<&str>) -> Result<Option<kiln_http::Secret>> {
    let Some(t) = token else { return Ok(None) };
    // Callers check where the token came from; this is the last line of defence, before it is sent.
    check_token(t, "the caller")?;
    Ok(Some(kiln_http::Secret::raw(t).context("the registry token holds a control character")?))
}

pub fn get(url: &str, token: Option<&str>) -> Result<Response> {
    let auth = auth(token)?;
    Ok(client().get_small(url, ANSWER_CAP, &kiln_http::Extra { auth: auth.as_ref(), headers: &[] })?)
}

/// `PUT` with an `application/octet-stream` body.
pub fn put(url: &str, body: &[u8], token: Option<&str>) -> Result<Response> {
    let auth = auth(token)?;
    let headers = [("Content-Type", "application/octet-stream")];
    Ok(client().put(url, kiln_http::Body::Bytes(body), &kiln_http::Extra { auth: auth.as_ref(), headers: &headers })?)
}
