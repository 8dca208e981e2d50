//! A small TCP proxy to put in front of a server, to make the network misbehave on
//! purpose: a link with latency, and faults (delay, blackhole, reset).
//!
//! It listens on a free loopback port and forwards to a loopback upstream only.
//!
//! **Latency** ([`Proxy::set_latency`]) is the distance to the server: each chunk is
//! delivered a one-way delay (plus or minus a jitter) after the proxy read it, in
//! order, without limiting bandwidth (chunks in flight overlap, as on a real link), so
//! a request and its answer cost one round trip of `2 x one_way` more than on
//! loopback. The wait is a Linux `timerfd` (microseconds), not tokio's timer, which
//! rounds every sleep up to the next millisecond and would turn a 0.25 ms hop into 1.
//!
//! **Round trips** ([`Proxy::round_trips`]) are counted as turns of the conversation
//! on each connection: the client spoke, then the server answered. Requests pipelined
//! on one connection before the answer count once, which is what the latency costs.
//!
//! **Faults** ([`Proxy::set`]) can be changed at any time and apply to open connections
//! too:
//! - [`ProxyMode::Pass`]: bytes flow both ways;
//! - [`ProxyMode::Delay`]: every chunk waits this long before it is forwarded, one
//!   after the other (a congested link: each request/answer pays it once each way);
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
//! use testbed::proxy::{Latency, Proxy, ProxyMode};
//! let redis = testbed::Redis::start("redis-behind-proxy").unwrap();
//! let proxy = Proxy::start(redis.port()).unwrap();
//! // clients use 127.0.0.1:{proxy.port()} instead of redis.port()
//! proxy.set_latency(Latency::round_trip(Duration::from_micros(500)));
//! proxy.set(ProxyMode::Delay(Duration::from_millis(200)));
//! proxy.set(ProxyMode::Blackhole);
//! proxy.set(ProxyMode::Pass);
//! println!("{} round trips", proxy.round_trips());
//! ```

use crate::{Error, Result};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

/// What the proxy does to the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    Pass,
    Delay(Duration),
    Blackhole,
    Reset,
}

/// The distance to the server: every chunk arrives `one_way` after it left, give or
/// take up to `jitter` (uniform), never out of order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    pub one_way: Duration,
    pub jitter: Duration,
}

impl Latency {
    /// The longest round trip the command lines accept (`--rtt-ms`, `--jitter-ms`).
    pub const MAX_MS: f64 = 10_000.0;

    /// A delay in milliseconds as a command line gives it: a finite number from 0 to
    /// [`Latency::MAX_MS`] (clap's `value_parser` for `--rtt-ms`).
    pub fn parse_ms(text: &str) -> Result<f64, String> {
        let ms: f64 = text
            .parse()
            .map_err(|_| format!("{text:?} is not a number"))?;
        if ms.is_finite() && (0.0..=Self::MAX_MS).contains(&ms) {
            Ok(ms)
        } else {
            Err(format!("{text} is out of range (0 to {} ms)", Self::MAX_MS))
        }
    }

    /// A link whose round trip is `rtt` (half of it each way), without jitter.
    pub fn round_trip(rtt: Duration) -> Latency {
        Latency {
            one_way: rtt / 2,
            jitter: Duration::ZERO,
        }
    }

    /// The same with a jitter of up to `jitter` on each hop.
    pub fn with_jitter(self, jitter: Duration) -> Latency {
        Latency { jitter, ..self }
    }

    pub fn is_zero(&self) -> bool {
        self.one_way.is_zero() && self.jitter.is_zero()
    }

    /// One hop's delay: `one_way` plus or minus a uniform draw within `jitter`.
    fn draw(&self) -> Duration {
        if self.jitter.is_zero() {
            return self.one_way;
        }
        let jitter = self.jitter.as_secs_f64();
        let offset = rand::random_range(-jitter..=jitter);
        Duration::from_secs_f64((self.one_way.as_secs_f64() + offset).max(0.0))
    }
}

/// What every connection of one proxy shares.
struct Shared {
    mode: watch::Receiver<ProxyMode>,
    latency: watch::Receiver<Latency>,
    round_trips: Arc<AtomicU64>,
    open: Arc<AtomicUsize>,
}

/// One connection counted open while it lives.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn count(open: &Arc<AtomicUsize>) -> Open {
        open.fetch_add(1, Ordering::AcqRel);
        Open(open.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A running proxy; dropping it stops it.
pub struct Proxy {
    port: u16,
    mode: watch::Sender<ProxyMode>,
    latency: watch::Sender<Latency>,
    round_trips: Arc<AtomicU64>,
    open: Arc<AtomicUsize>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port in front of `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> Result<Proxy> {
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        Self::start_at(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), upstream)
    }

    /// Starts a proxy listening on `listen` (another loopback address, `127.0.0.2`,
    /// with the upstream's own port: what a Redis Cluster node announces to its peers)
    /// in front of `upstream`. A taken address is [`Error::PortInUse`].
    pub fn start_at(listen: SocketAddr, upstream: SocketAddr) -> Result<Proxy> {
        let listener = std::net::TcpListener::bind(listen).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => Error::PortInUse {
                server: "proxy".into(),
                port: listen.port(),
            },
            _ => Error::io("proxy: binding")(e),
        })?;
        listener
            .set_nonblocking(true)
            .map_err(Error::io("proxy: binding"))?;
        let port = listener
            .local_addr()
            .map_err(Error::io("proxy: binding"))?
            .port();
        let (mode, mode_rx) = watch::channel(ProxyMode::Pass);
        let (latency, latency_rx) = watch::channel(Latency::default());
        let round_trips = Arc::new(AtomicU64::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Shared {
            mode: mode_rx,
            latency: latency_rx,
            round_trips: round_trips.clone(),
            open: open.clone(),
        });
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
                        _ = accept_loop(listener, upstream, shared) => {}
                        _ = shutdown_rx => {}
                    }
                });
                // Dropping the runtime here ends every connection task.
            })
            .map_err(Error::io("proxy: thread"))?;
        Ok(Proxy {
            port,
            mode,
            latency,
            round_trips,
            open,
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

    /// Changes the link's latency, for open and new connections (chunks already on
    /// their way keep the one they left with).
    pub fn set_latency(&self, latency: Latency) {
        self.latency.send_replace(latency);
    }

    pub fn latency(&self) -> Latency {
        *self.latency.borrow()
    }

    /// Round trips so far, over every connection: the turns where the server answered
    /// something the client had sent.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Client connections the proxy holds open now. After [`ProxyMode::Reset`], 0 once
    /// every connection open before it has been reset: a test waits for that instead
    /// of a while.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// A handle that reads [`Proxy::round_trips`] without holding the proxy.
    pub fn round_trip_counter(&self) -> Arc<AtomicU64> {
        self.round_trips.clone()
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

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    while let Ok((client, _)) = listener.accept().await {
        // Counted as accepted, before its task starts.
        let open = Open::count(&shared.open);
        tokio::spawn(connection(client, upstream, shared.clone(), open));
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

/// Which way a pump copies, for the round-trip count.
#[derive(Clone, Copy)]
enum Way {
    /// Client to server: a request (or more) goes out.
    Out,
    /// Server to client: an answer to what went out counts one round trip.
    Back,
}

/// One connection's turn-taking: set when the client spoke, cleared (and counted) when
/// the server answered.
struct Turns {
    asked: AtomicBool,
    counter: Arc<AtomicU64>,
}

impl Turns {
    fn saw(&self, way: Way) {
        match way {
            Way::Out => self.asked.store(true, Ordering::Relaxed),
            Way::Back => {
                if self.asked.swap(false, Ordering::Relaxed) {
                    self.counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

async fn connection(mut client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>, _open: Open) {
    if *shared.mode.borrow() == ProxyMode::Reset {
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
    let turns = Turns {
        asked: AtomicBool::new(false),
        counter: shared.round_trips.clone(),
    };
    let end = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        tokio::select! {
            end = pump(&mut client_read, &mut server_write, &shared, &turns, Way::Out) => end,
            end = pump(&mut server_read, &mut client_write, &shared, &turns, Way::Back) => end,
        }
    };
    if let End::Reset = end {
        reset(client);
        reset(server);
    }
}

/// Copies one direction, chunk by chunk, obeying the mode before each chunk. Reading
/// and writing run side by side: what was read waits out the latency on its way to
/// the writer while the next chunk is read.
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    shared: &Shared,
    turns: &Turns,
    way: Way,
) -> End {
    let (line, mut arrivals) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = read_side(from, shared, turns, way, line);
    let writing = async move {
        let mut timer = Timer::new();
        while let Some((at, bytes)) = arrivals.recv().await {
            timer.sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    tokio::pin!(reading, writing);
    tokio::select! {
        end = &mut reading => {
            // Deliver what is still on the wire before the end (a reset cuts it).
            if let End::Closed = end {
                writing.await;
            }
            end
        }
        () = &mut writing => End::Closed,
    }
}

async fn read_side(
    from: &mut (impl AsyncRead + Unpin),
    shared: &Shared,
    turns: &Turns,
    way: Way,
    line: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
) -> End {
    let mut mode = shared.mode.clone();
    let mut buf = vec![0u8; 16 * 1024];
    // The latest arrival time handed to the writer: jitter never reorders bytes.
    let mut last = Instant::now();
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
        let read_at = Instant::now();
        turns.saw(way);
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
        let latency = *shared.latency.borrow();
        let at = (read_at + latency.draw()).max(last);
        last = at;
        if line.send((at, buf[..n].to_vec())).is_err() {
            return End::Closed;
        }
    }
}

/// Waits until an instant with microsecond precision: a one-shot `timerfd` watched by
/// the runtime (tokio's own timer rounds up to whole milliseconds). Without a timerfd
/// (it cannot fail on Linux short of running out of descriptors) it falls back to
/// tokio's timer.
struct Timer {
    fd: Option<tokio::io::unix::AsyncFd<RawTimer>>,
}

/// nix's `TimerFd` as tokio's `AsyncFd` wants it (`AsRawFd`; nix gives `AsFd`).
struct RawTimer(nix::sys::timerfd::TimerFd);

impl std::os::fd::AsRawFd for RawTimer {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

impl Timer {
    fn new() -> Timer {
        use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .ok()
        // SAFETY: the descriptor is the timerfd `RawTimer` owns; it stays open, and the
        // same, until the `AsyncFd` (which owns the `RawTimer`) is dropped.
        .and_then(|fd| unsafe { tokio::io::unix::AsyncFd::register(RawTimer(fd)) }.ok());
        Timer { fd }
    }

    async fn sleep_until(&mut self, at: Instant) {
        use nix::sys::time::TimeSpec;
        use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
        let now = Instant::now();
        if at <= now {
            return;
        }
        let wait = at - now;
        let Some(fd) = &self.fd else {
            return tokio::time::sleep(wait).await;
        };
        if fd
            .get_ref()
            .0
            .set(
                Expiration::OneShot(TimeSpec::from_duration(wait)),
                TimerSetTimeFlags::empty(),
            )
            .is_err()
        {
            return tokio::time::sleep(wait).await;
        }
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return tokio::time::sleep_until(at.into()).await;
            };
            // Reading the expiration count disarms the readiness; EAGAIN means the
            // wake-up was stale (a previous expiration) and the timer still runs.
            let mut count = [0u8; 8];
            match ready.try_io(|fd| {
                nix::unistd::read(&fd.get_ref().0, &mut count).map_err(std::io::Error::from)
            }) {
                Ok(_) => return,
                Err(_would_block) => continue,
            }
        }
    }
}
