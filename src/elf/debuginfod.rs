//! A debuginfod client: debug files by build id, from the client cache the elfutils tools share,
//! fetched over HTTP from the servers of `DEBUGINFOD_URLS` when missing.
//!
//! The cache is `$DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`, else
//! `~/.cache/debuginfod_client`; a debug file is `CACHE/<build id>/debuginfo`, as
//! `debuginfod-find` leaves it. Only `http://` servers are fetched from (the request is one
//! plain HTTP/1.0 GET); an `https://` one is a warning.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one server has to connect and answer each read.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The debuginfod cache, and the servers that fill it.
#[derive(Clone, Debug, Default)]
pub struct Debuginfod {
    /// The server URLs (`DEBUGINFOD_URLS`, space-separated).
    pub urls: Vec<String>,
    /// The client cache; `None` without a home folder.
    pub cache: Option<PathBuf>,
}

impl Debuginfod {
    /// As the environment says, the way the elfutils client reads it.
    pub fn from_environment() -> Debuginfod {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        let urls = var("DEBUGINFOD_URLS")
            .map(|v| {
                v.to_string_lossy()
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let cache = var("DEBUGINFOD_CACHE_PATH")
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| Path::new(&d).join("debuginfod_client")))
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache/debuginfod_client")));
        Debuginfod { urls, cache }
    }

    /// The cached debug file of build id `hex` (of the file at `path`), fetched first when it
    /// is missing and a server is set.
    pub fn find(&self, hex: &str, path: &Path) -> Option<PathBuf> {
        let cache = self.cache.as_ref()?;
        let cached = cache.join(hex).join("debuginfo");
        if cached.is_file() {
            return Some(cached);
        }
        for url in &self.urls {
            if !url.starts_with("http://") {
                warn_once_unsupported(url);
                continue;
            }
            let address = format!("{}/buildid/{hex}/debuginfo", url.trim_end_matches('/'));
            log::info!(
                "fetching the debug file of {} from {address}",
                path.display()
            );
            match fetch(&address).and_then(|body| store(&cached, &body).map(|()| body.len())) {
                Ok(size) => {
                    log::info!("fetched {size} bytes into {}", cached.display());
                    return Some(cached);
                }
                Err(error) => log::warn!("cannot fetch {address}: {error}"),
            }
        }
        None
    }
}

/// Says once per run that `url` is not fetched from (Debian's default server is `https://`).
fn warn_once_unsupported(url: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        log::warn!(
            "debuginfod server {url} is not asked: utrace fetches only from http:// servers \
             (fetch with debuginfod-find, whose cache utrace reads)"
        )
    });
}

/// The body of `GET url`, an `http://` URL, when the server answers 200.
fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// debuginfod servers are supported")?;
    let (host, target) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:80")
    };
    let address = authority
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("the host has no address")?;
    let mut stream = TcpStream::connect_timeout(&address, TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {target} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: utrace\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| e.to_string())?;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the server's answer has no header")?;
    let head = String::from_utf8_lossy(&response[..head_end]);
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("the server answered {status}"));
    }
    Ok(response.split_off(head_end + 4))
}

/// Writes `body` at `cached`, whole or not at all.
fn store(cached: &Path, body: &[u8]) -> Result<(), String> {
    let folder = cached.parent().ok_or("no cache folder")?;
    std::fs::create_dir_all(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    let partial = folder.join(".debuginfo.utrace-partial");
    std::fs::write(&partial, body)
        .and_then(|()| std::fs::rename(&partial, cached))
        .map_err(|e| format!("{}: {e}", cached.display()))
}
