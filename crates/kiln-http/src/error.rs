//! What went wrong with one request, always naming its URL.

use std::{fmt, io, path::PathBuf, time::Duration};

/// A failed request: the URL and the cause. Never holds a credential (URLs
/// with a user or password in them are refused before anything is sent).
#[derive(Debug)]
pub struct Error {
    pub url: String,
    pub kind: Kind,
}

#[derive(Debug)]
pub enum Kind {
    /// Not an `http://` or `https://` URL.
    Scheme,
    /// A `user:password@` in the URL (not shown: it is a secret).
    Credentials,
    /// A URL kiln cannot send (no host, spaces, control characters).
    BadUrl(String),
    /// The server could not be reached (name, connection, TLS, proxy).
    Unreachable(String),
    /// No answer, or no byte, within the time allowed (`what` says which bound).
    TimedOut { what: &'static str, after: Duration },
    /// A redirect where none is allowed, or to a place that is refused.
    Redirect { status: u16, location: String, why: &'static str },
    /// The body was longer than the caller allows; cut off there.
    TooLarge { limit: u64 },
    /// The body ended before the size the caller expects.
    Truncated { got: u64, expected: u64 },
    /// The disk holding `folder` is full (or over quota).
    DiskFull { folder: PathBuf },
    /// Writing or reading a local file failed for another reason.
    File { path: PathBuf, error: io::Error },
    /// The server's answer is not HTTP kiln can read, or the connection broke mid-answer.
    Protocol(String),
    /// A proxy variable of the environment kiln cannot use (its value is not shown).
    Proxy(String),
}

impl Error {
    pub(crate) fn new(url: &str, kind: Kind) -> Error {
        Error { url: url.to_string(), kind }
    }

    /// Whether the server could not be reached or did not answer in time: a
    /// remote cache is then not asked again in the run.
    pub fn is_unreachable(&self) -> bool {
        matches!(self.kind, Kind::Unreachable(_) | Kind::TimedOut { .. })
    }

    /// The cause alone, without the URL.
    pub fn cause(&self) -> String {
        let text = self.to_string();
        text.strip_prefix(&format!("{}: ", self.url)).map(str::to_string).unwrap_or(text)
    }

    /// Whether the fault is on this machine (a full disk, a file that cannot be
    /// written): another mirror will not help.
    pub fn is_local(&self) -> bool {
        matches!(self.kind, Kind::DiskFull { .. } | Kind::File { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = &self.url;
        match &self.kind {
            Kind::Scheme => write!(f, "{url}: not an http:// or https:// URL; kiln speaks HTTP(S) only"),
            Kind::Credentials => write!(
                f,
                "the URL {} holds credentials (user:password@host), which kiln refuses: they would be printed with it",
                crate::without_userinfo(url)
            ),
            Kind::BadUrl(why) => write!(f, "{}: {why}", url.escape_default()),
            Kind::Unreachable(why) => write!(f, "{url}: cannot reach the server ({why})"),
            Kind::TimedOut { what, after } => write!(f, "{url}: {what} within {} s", after.as_secs_f64()),
            Kind::Redirect { status, location, why } => {
                write!(f, "{url}: the server redirects (HTTP {status}) to {}, {why}", location.escape_default())
            }
            Kind::TooLarge { limit } => write!(f, "{url}: the server sent more than the {limit} bytes expected; cut off there, nothing kept"),
            Kind::Truncated { got, expected } => {
                write!(f, "{url}: the answer ended after {got} of the {expected} bytes expected; nothing kept")
            }
            Kind::DiskFull { folder } => {
                write!(f, "{url}: the disk is full: cannot write the download into {} (free some space there)", folder.display())
            }
            Kind::File { path, error } => write!(f, "{url}: cannot write {}: {error}", path.display()),
            Kind::Protocol(why) => write!(f, "{url}: {why}"),
            Kind::Proxy(why) => write!(f, "{url}: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// Whether `e` says the disk (or the user's quota) is full.
pub(crate) fn is_disk_full(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded)
}

/// A local file error, a full disk named by its folder.
pub(crate) fn file_error(url: &str, path: &std::path::Path, error: io::Error) -> Error {
    if is_disk_full(&error) {
        let folder = if path.is_dir() { path.to_path_buf() } else { path.parent().unwrap_or(path).to_path_buf() };
        return Error::new(url, Kind::DiskFull { folder });
    }
    Error::new(url, Kind::File { path: path.to_path_buf(), error })
}

/// ureq's error as kiln's, without anything of the request's headers.
pub(crate) fn from_ureq(url: &str, e: ureq::Error, timeouts: &crate::Options) -> Error {
    use ureq::Error as U;
    let kind = match e {
        U::Timeout(t) => {
            let (what, after) = match t {
                ureq::Timeout::Resolve | ureq::Timeout::Connect => ("could not connect", timeouts.connect),
                ureq::Timeout::Global | ureq::Timeout::PerCall => ("the request did not finish", timeouts.total),
                _ => ("the server stalled (no byte received or sent)", timeouts.stall),
            };
            Kind::TimedOut { what, after }
        }
        U::HostNotFound => Kind::Unreachable("the host name does not resolve".into()),
        U::ConnectionFailed => Kind::Unreachable("the connection failed".into()),
        U::Io(io) => match io.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                Kind::TimedOut { what: "the server stalled (no byte received or sent)", after: timeouts.stall }
            }
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::AddrNotAvailable
            | io::ErrorKind::NotConnected => Kind::Unreachable(io.to_string()),
            // A server that closes or resets before answering was not reached as a server.
            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe => {
                Kind::Unreachable(format!("the connection was closed: {io}"))
            }
            _ => Kind::Protocol(format!("connection error: {io}")),
        },
        U::Tls(why) => Kind::Unreachable(format!("TLS: {why}")),
        U::Rustls(r) => Kind::Unreachable(format!("TLS: {r}")),
        U::Pem(p) => Kind::Unreachable(format!("TLS certificates: {p}")),
        U::ConnectProxyFailed(why) => Kind::Unreachable(format!("the proxy refused the connection: {}", why.escape_default())),
        U::InvalidProxyUrl => Kind::Proxy("the proxy URL of the environment is not valid".into()),
        U::BadUri(why) => Kind::BadUrl(why),
        U::LargeResponseHeader(..) => Kind::Protocol("the response's header is too large".into()),
        U::Protocol(p) => Kind::Protocol(format!("not an HTTP answer kiln can read: {p}")),
        other => Kind::Protocol(other.to_string()),
    };
    Error::new(url, kind)
}
