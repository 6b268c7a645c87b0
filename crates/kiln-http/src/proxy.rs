//! Proxies and TLS roots from the environment, read the way curl reads them.
//!
//! - An `http://` URL goes through `http_proxy` (lower case only: a web
//!   server's CGI sets `HTTP_PROXY` from a request's `Proxy:` header), an
//!   `https://` one through `HTTPS_PROXY`/`https_proxy`; either, failing that,
//!   through `ALL_PROXY`/`all_proxy`.
//! - `NO_PROXY`/`no_proxy`: host names (a leading `.` optional) whose host and
//!   sub-domains go direct; `*`: every host.
//! - An HTTP(S) proxy (a `CONNECT` tunnel, for http targets too) or a SOCKS
//!   one (`socks4`, `socks4a`, `socks5`: names resolved here, `socks5h`: by
//!   the proxy); its `user:password@` goes to the proxy only, and the
//!   variable's value is never printed.
//! - TLS roots: the PEM file `CURL_CA_BUNDLE` or else `SSL_CERT_FILE` names, else the system's bundle
//!   (`/etc/ssl/certs/ca-certificates.crt`, where update-ca-certificates puts
//!   a company's own CA too), else the Mozilla roots built into kiln.

use std::sync::Arc;

use ureq::{tls::RootCerts, Agent, Proxy};

use crate::{Error, Kind, Options};

const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

pub(crate) struct Agents {
    direct: Result<Agent, String>,
    http: Option<Result<Agent, String>>,
    https: Option<Result<Agent, String>>,
    no_proxy: Vec<String>,
}

fn var(names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()).map(|v| (n.to_string(), v)))
}

fn roots() -> Result<RootCerts, String> {
    let named = ["CURL_CA_BUNDLE", "SSL_CERT_FILE"].into_iter().find_map(|v| std::env::var_os(v).filter(|f| !f.is_empty()).map(|f| (v, f)));
    let (var, file, required) = match named {
        Some((var, f)) => (var, std::path::PathBuf::from(f), true),
        None => ("", SYSTEM_BUNDLE.into(), false),
    };
    let pem = match std::fs::read(&file) {
        Ok(p) => p,
        Err(e) if required => return Err(format!("{var} names {}, which cannot be read: {e}", file.display())),
        Err(_) => return Ok(RootCerts::WebPki),
    };
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        if required {
            return Err(format!("{var} names {}, which holds no PEM certificate", file.display()));
        }
        return Ok(RootCerts::WebPki);
    }
    Ok(RootCerts::Specific(Arc::new(certs)))
}

fn proxy_agent(options: &Options, roots: &Arc<RootCerts>, (name, value): (String, String)) -> Result<Agent, String> {
    let value = if value.contains("://") { value } else { format!("http://{value}") };
    let scheme = value.split("://").next().unwrap_or("").to_ascii_lowercase();
    if !["http", "https", "socks4", "socks4a", "socks5", "socks5h"].contains(&scheme.as_str()) {
        return Err(format!(
            "{name} names a proxy of a scheme kiln does not speak (http, https, socks4, socks4a, socks5, socks5h; its value is not shown)"
        ));
    }
    let proxy = Proxy::new(&value).map_err(|_| format!("{name} is not a proxy URL kiln can use (its value is not shown)"))?;
    Ok(crate::agent(options, Some(proxy), roots.clone()))
}

impl Agents {
    pub(crate) fn from_env(options: &Options) -> Agents {
        let roots = match roots() {
            Ok(r) => Arc::new(r),
            Err(why) => {
                let e = Err(why);
                return Agents { direct: e.clone(), http: Some(e.clone()), https: Some(e), no_proxy: Vec::new() };
            }
        };
        let all = var(&["ALL_PROXY", "all_proxy"]);
        let http = var(&["http_proxy"]).or_else(|| all.clone()).map(|v| proxy_agent(options, &roots, v));
        let https = var(&["HTTPS_PROXY", "https_proxy"]).or(all).map(|v| proxy_agent(options, &roots, v));
        let no_proxy = var(&["NO_PROXY", "no_proxy"])
            .map(|(_, v)| v.split(',').map(|h| h.trim().trim_start_matches('.').to_ascii_lowercase()).filter(|h| !h.is_empty()).collect())
            .unwrap_or_default();
        Agents { direct: Ok(crate::agent(options, None, roots)), http, https, no_proxy }
    }

    fn bypass(&self, host: &str) -> bool {
        self.no_proxy.iter().any(|n| n == "*" || host == n || host.strip_suffix(n.as_str()).is_some_and(|h| h.ends_with('.')))
    }

    /// The agent for a URL of `scheme` to `host`, or why there is none.
    pub(crate) fn for_url(&self, url: &str, scheme: &str, host: &str) -> Result<&Agent, Error> {
        let via = if self.bypass(host) {
            None
        } else if scheme == "https" {
            self.https.as_ref()
        } else {
            self.http.as_ref()
        };
        via.unwrap_or(&self.direct).as_ref().map_err(|why| Error::new(url, Kind::Proxy(why.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_matches_hosts_and_their_subdomains() {
        let a = Agents { direct: Err(String::new()), http: None, https: None, no_proxy: vec!["example.com".into(), "10.0.0.1".into()] };
        assert!(a.bypass("example.com") && a.bypass("cache.example.com") && a.bypass("10.0.0.1"));
        assert!(!a.bypass("badexample.com") && !a.bypass("example.org"));
        let all = Agents { no_proxy: vec!["*".into()], ..a };
        assert!(all.bypass("anything"));
    }
}
