//! The accept loop: HTTP/1.1 connections served by the router, header
//! names written in title case (`Access-Control-Allow-Origin`) as
//! llama.cpp's cpp-httplib writes them (clients that copy the headers into
//! a plain dict, as its test suite does, look them up so), until `shutdown`
//! completes.

use std::future::Future;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// How long [`bind`] waits for a port in use to be freed.
pub const BIND_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Listen on `addr`; a port still held (a server on it exiting) is tried
/// again for up to [`BIND_WAIT`] before the error is returned.
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let t0 = std::time::Instant::now();
    loop {
        match TcpListener::bind(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && t0.elapsed() < BIND_WAIT => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

/// Serve `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                // a connection that failed before it was accepted (reset,
                // out of descriptors): go on with the next
                Err(e) => {
                    eprintln!("llama-server: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = &mut shutdown => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .title_case_headers(true)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
