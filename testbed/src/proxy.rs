//! A small TCP proxy to put in front of a server, to make the network misbehave on
//! purpose: pass, delay, blackhole or reset.
//!
//! It listens on a free loopback port and forwards to a loopback upstream only. The
//! mode can be changed at any time and applies to open connections too:
//! - [`ProxyMode::Pass`]: bytes flow both ways;
//! - [`ProxyMode::Delay`]: every chunk waits this long before it is forwarded (a slow
//!   link: each request/answer pays it once each way);
//! - [`ProxyMode::Blackhole`]: connections are accepted and held, nothing is read or
//!   forwarded (a partition: the client sees no error, only silence) until the mode
//!   changes;
//! - [`ProxyMode::Reset`]: open connections are reset (RST) and new ones are reset as
//!   soon as they are accepted (a crashed peer).
//!
//! The proxy runs on a thread of its own with its own small runtime, so it works the
//! same from sync and async tests; dropping it stops it and closes every connection.
//!
//! ```no_run
//! use std::time::Duration;
//! let redis = testbed::Redis::start("redis-behind-proxy").unwrap();
//! let proxy = testbed::proxy::Proxy::start(redis.port()).unwrap();
//! // clients use 127.0.0.1:{proxy.port()} instead of redis.port()
//! proxy.set(testbed::proxy::ProxyMode::Delay(Duration::from_millis(200)));
//! proxy.set(testbed::proxy::ProxyMode::Blackhole);
//! proxy.set(testbed::proxy::ProxyMode::Pass);
//! ```

use crate::{Error, Result};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// What the proxy does to the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    Pass,
    Delay(Duration),
    Blackhole,
    Reset,
}

/// A running proxy; dropping it stops it.
pub struct Proxy {
    port: u16,
    mode: watch::Sender<ProxyMode>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port in front of `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> Result<Proxy> {
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(Error::io("proxy: binding"))?;
        listener
            .set_nonblocking(true)
            .map_err(Error::io("proxy: binding"))?;
        let port = listener
            .local_addr()
            .map_err(Error::io("proxy: binding"))?
            .port();
        let (mode, mode_rx) = watch::channel(ProxyMode::Pass);
        let (shutdown, shutdown_rx) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::io("proxy: runtime"))?;
        let thread = std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener =
                        TcpListener::from_std(listener).expect("a non-blocking listener");
                    tokio::select! {
                        _ = accept_loop(listener, upstream, mode_rx) => {}
                        _ = shutdown_rx => {}
                    }
                });
                // Dropping the runtime here ends every connection task.
            })
            .map_err(Error::io("proxy: thread"))?;
        Ok(Proxy {
            port,
            mode,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The port clients connect to instead of the upstream's.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Changes what the proxy does, for open and new connections.
    pub fn set(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> ProxyMode {
        *self.mode.borrow()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<ProxyMode>,
) {
    while let Ok((client, _)) = listener.accept().await {
        tokio::spawn(connection(client, upstream, mode.clone()));
    }
}

/// Closes with RST instead of FIN: linger 0 makes close(2) abort the connection (and
/// return at once, so nothing blocks).
fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

enum End {
    Closed,
    Reset,
}

async fn connection(mut client: TcpStream, upstream: SocketAddr, mode: watch::Receiver<ProxyMode>) {
    if *mode.borrow() == ProxyMode::Reset {
        return reset(client);
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return reset(client);
    };
    // Forward each chunk at once: with Nagle on, a small write waits for the previous
    // one's ACK, which the peer delays up to 40 ms (a replica's acknowledgements
    // through the proxy took 44 ms instead of 0.1).
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let end = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        tokio::select! {
            end = pump(&mut client_read, &mut server_write, mode.clone()) => end,
            end = pump(&mut server_read, &mut client_write, mode.clone()) => end,
        }
    };
    if let End::Reset = end {
        reset(client);
        reset(server);
    }
}

/// Copies one direction, chunk by chunk, obeying the mode before each chunk.
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    mut mode: watch::Receiver<ProxyMode>,
) -> End {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // Hold while blackholed: read nothing, forward nothing.
        loop {
            let current = *mode.borrow_and_update();
            match current {
                ProxyMode::Reset => return End::Reset,
                ProxyMode::Blackhole => {
                    if mode.changed().await.is_err() {
                        return End::Closed;
                    }
                }
                _ => break,
            }
        }
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            _ = mode.changed() => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return End::Closed,
            Ok(n) => n,
        };
        // The mode may have changed while we waited for these bytes.
        loop {
            let current = *mode.borrow_and_update();
            match current {
                ProxyMode::Pass => break,
                ProxyMode::Delay(delay) => {
                    tokio::time::sleep(delay).await;
                    break;
                }
                ProxyMode::Reset => return End::Reset,
                ProxyMode::Blackhole => {
                    if mode.changed().await.is_err() {
                        return End::Closed;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return End::Closed;
        }
    }
}
