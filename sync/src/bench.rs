//! Transport baselines and instrumentation for `prox bench sync`.
//!
//! * [`CountingProxy`]: a loopback TCP relay that counts every byte in both
//!   directions, so "bytes on the wire" includes Noise, Yamux, multistream
//!   and frame headers.
//! * [`bare_stream_copy`]: the same blocks pushed over one bare
//!   libp2p-stream on the same transport (TCP + Noise + Yamux), framed as
//!   `u32 len | bytes`, each block hashed on receipt: the ceiling the sync
//!   protocol is compared against.
//!   It can also cap what a source sends ([`CountingProxy::start_capped`]),
//!   for pulls from several rate-limited sources.
//! * [`raw_tcp_copy`]: the same framing and hashing over a plain TCP socket.

use crate::error::{Error, Result};
use bytes::Bytes;
use futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p::StreamProtocol;
pub use libp2p::{identity::Keypair, multiaddr::Protocol, Multiaddr};
use prox_engine::Cid;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Result of a baseline copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyStats {
    /// Wall time from the first byte sent to the last block verified.
    pub seconds: f64,
    /// Payload bytes copied.
    pub bytes: u64,
}

/// How a [`CountingProxy`] shapes the link it relays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Where the relay listens (port 0: any free port).
    pub bind: SocketAddr,
    /// Bytes/s the target may send through the relay (all connections
    /// together); `None`: unlimited.
    pub rate: Option<u64>,
    /// One-way delay added to every chunk, in both directions.
    pub delay: Duration,
}

/// A TCP relay counting bytes in both directions.
#[derive(Debug)]
pub struct CountingProxy {
    addr: SocketAddr,
    bytes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    /// Relays connections made to [`addr`](Self::addr) to `target`.
    pub async fn start(target: SocketAddr) -> Result<CountingProxy> {
        Self::start_capped(target, None).await
    }

    /// [`start`](Self::start) with every byte leaving `target` (all its
    /// connections together) paced to at most `rate` bytes/s: a source
    /// behind a link of that capacity.
    pub async fn start_capped(target: SocketAddr, rate: Option<u64>) -> Result<CountingProxy> {
        let bind = SocketAddr::from(([127, 0, 0, 1], 0));
        Self::start_with(
            target,
            Link {
                bind,
                rate,
                delay: Duration::ZERO,
            },
        )
        .await
    }

    /// A relay on `link.bind` to `target` that shapes the link: every
    /// byte leaving `target` paced to `link.rate`, and every chunk in
    /// either direction held `link.delay` before it is passed on (the
    /// round trip grows by twice the delay; throughput is not capped by
    /// it).
    pub async fn start_with(target: SocketAddr, link: Link) -> Result<CountingProxy> {
        let pacer = link.rate.map(|r| Arc::new(Pacer::new(r)));
        let delay = link.delay;
        let listener = tokio::net::TcpListener::bind(link.bind).await?;
        let addr = listener.local_addr()?;
        let bytes = Arc::new(AtomicU64::new(0));
        let counter = bytes.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let counter = counter.clone();
                let pacer = pacer.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    let a = tokio::spawn(pump(ri, wo, counter.clone(), None, delay));
                    let b = tokio::spawn(pump(ro, wi, counter, pacer, delay));
                    let _ = tokio::join!(a, b);
                });
            }
        });
        Ok(CountingProxy { addr, bytes, task })
    }

    /// Address to dial instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Bytes relayed so far (both directions).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Resets the counter.
    pub fn reset(&self) {
        self.bytes.store(0, Ordering::Relaxed);
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A token bucket without burst: each chunk may leave once the ones
/// before it have had their time at `rate` bytes/s.
#[derive(Debug)]
struct Pacer {
    rate: u64,
    next: std::sync::Mutex<Instant>,
}

impl Pacer {
    fn new(rate: u64) -> Pacer {
        Pacer {
            rate: rate.max(1),
            next: std::sync::Mutex::new(Instant::now()),
        }
    }

    /// When `n` bytes may leave.
    fn slot(&self, n: usize) -> Instant {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let start = (*next).max(Instant::now());
        let cost = std::time::Duration::from_secs_f64(n as f64 / self.rate as f64);
        *next = start + cost;
        *next
    }
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    w: tokio::net::tcp::OwnedWriteHalf,
    counter: Arc<AtomicU64>,
    pacer: Option<Arc<Pacer>>,
    delay: Duration,
) {
    // Paced: small chunks, so one connection cannot take a whole second's
    // budget in one read.
    let mut buf = vec![0u8; if pacer.is_some() { 16 << 10 } else { 256 << 10 }];
    let mut sink = Sink::new(w, delay);
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                counter.fetch_add(n as u64, Ordering::Relaxed);
                if let Some(p) = &pacer {
                    tokio::time::sleep_until(p.slot(n).into()).await;
                }
                if !sink.put(&buf[..n]).await {
                    break;
                }
            }
        }
    }
    sink.close().await;
}

/// Where a pump's chunks go: straight to the socket, or (with a delay)
/// through a bounded queue (its capacity bounds the bytes held) to a
/// writer that releases each chunk at its time.
enum Sink {
    Direct(tokio::net::tcp::OwnedWriteHalf),
    Delayed {
        tx: tokio::sync::mpsc::Sender<(Instant, Vec<u8>)>,
        writer: tokio::task::JoinHandle<()>,
        delay: Duration,
    },
}

impl Sink {
    fn new(w: tokio::net::tcp::OwnedWriteHalf, delay: Duration) -> Sink {
        if delay.is_zero() {
            return Sink::Direct(w);
        }
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let writer = tokio::spawn(delayed_writer(rx, w));
        Sink::Delayed { tx, writer, delay }
    }

    /// Passes `chunk` on; false once the other side is gone.
    async fn put(&mut self, chunk: &[u8]) -> bool {
        match self {
            Sink::Direct(w) => w.write_all(chunk).await.is_ok(),
            Sink::Delayed { tx, delay, .. } => tx
                .send((Instant::now() + *delay, chunk.to_vec()))
                .await
                .is_ok(),
        }
    }

    /// Flushes what is queued, then shuts the write side down.
    async fn close(self) {
        match self {
            Sink::Direct(mut w) => {
                let _ = w.shutdown().await;
            }
            Sink::Delayed { tx, writer, .. } => {
                drop(tx);
                let _ = writer.await;
            }
        }
    }
}

async fn delayed_writer(
    mut rx: tokio::sync::mpsc::Receiver<(Instant, Vec<u8>)>,
    mut w: tokio::net::tcp::OwnedWriteHalf,
) {
    while let Some((due, chunk)) = rx.recv().await {
        tokio::time::sleep_until(due.into()).await;
        if w.write_all(&chunk).await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

/// A TCP socket address of a `/ip4/A/tcp/P` multiaddr.
pub fn socket_addr(addr: &Multiaddr) -> Option<SocketAddr> {
    use libp2p::multiaddr::Protocol;
    let mut ip = None;
    let mut port = None;
    for p in addr.iter() {
        match p {
            Protocol::Ip4(a) => ip = Some(std::net::IpAddr::V4(a)),
            Protocol::Ip6(a) => ip = Some(std::net::IpAddr::V6(a)),
            Protocol::Tcp(p) => port = Some(p),
            _ => {}
        }
    }
    Some(SocketAddr::new(ip?, port?))
}

/// A multiaddr for a socket address.
pub fn multiaddr(addr: SocketAddr) -> Multiaddr {
    use libp2p::multiaddr::Protocol;
    let ip = match addr.ip() {
        std::net::IpAddr::V4(a) => Protocol::Ip4(a),
        std::net::IpAddr::V6(a) => Protocol::Ip6(a),
    };
    Multiaddr::empty().with(ip).with(Protocol::Tcp(addr.port()))
}

const BARE: StreamProtocol = StreamProtocol::new("/prox/bench-bare/1");

fn bare_swarm() -> Result<libp2p::Swarm<libp2p_stream::Behaviour>> {
    Ok(libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            libp2p::tcp::Config::default().nodelay(true),
            libp2p::noise::Config::new,
            libp2p::yamux::Config::default,
        )
        .map_err(|e| Error::Config(e.to_string()))?
        .with_behaviour(|_| libp2p_stream::Behaviour::new())
        .map_err(|e| Error::Config(e.to_string()))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(std::time::Duration::from_secs(60)))
        .build())
}

/// Copies `blocks` over one bare libp2p stream (TCP + Noise + Yamux on
/// loopback, through a [`CountingProxy`] when `count` is set) and returns
/// the time and the bytes the proxy saw.
pub async fn bare_stream_copy(blocks: &[Bytes], count: bool) -> Result<(CopyStats, u64)> {
    let mut server = bare_swarm()?;
    let mut client = bare_swarm()?;
    server
        .listen_on("/ip4/127.0.0.1/tcp/0".parse().expect("valid multiaddr"))
        .map_err(|e| Error::network("listen", e))?;
    let listen = loop {
        if let libp2p::swarm::SwarmEvent::NewListenAddr { address, .. } =
            server.select_next_some().await
        {
            break address;
        }
    };
    let server_peer = *server.local_peer_id();
    let mut incoming = server
        .behaviour()
        .new_control()
        .accept(BARE)
        .map_err(|e| Error::Config(e.to_string()))?;
    let mut control = client.behaviour().new_control();
    let proxy = match (count, socket_addr(&listen)) {
        (true, Some(sa)) => Some(CountingProxy::start(sa).await?),
        _ => None,
    };
    let dial = proxy
        .as_ref()
        .map(|p| multiaddr(p.addr()))
        .unwrap_or(listen);
    client
        .dial(dial.with(libp2p::multiaddr::Protocol::P2p(server_peer)))
        .map_err(|e| Error::network("dial", e))?;
    let s_task = tokio::spawn(async move {
        loop {
            server.select_next_some().await;
        }
    });
    let c_task = tokio::spawn(async move {
        loop {
            client.select_next_some().await;
        }
    });
    let total: u64 = blocks.iter().map(|b| b.len() as u64).sum();
    let n = blocks.len();
    let receiver = tokio::spawn(async move {
        let (_, mut stream) = incoming
            .next()
            .await
            .ok_or_else(|| Error::network("bench", "no stream"))?;
        let mut got = 0u64;
        let mut len = [0u8; 4];
        let mut buf = Vec::new();
        for _ in 0..n {
            stream.read_exact(&mut len).await?;
            buf.resize(u32::from_be_bytes(len) as usize, 0);
            stream.read_exact(&mut buf).await?;
            std::hint::black_box(Cid::of(&buf));
            got += buf.len() as u64;
        }
        Ok::<_, Error>(got)
    });
    let mut stream = control
        .open_stream(server_peer, BARE)
        .await
        .map_err(|e| Error::network("bench", e))?;
    let start = Instant::now();
    let mut w = futures::io::BufWriter::with_capacity(64 << 10, &mut stream);
    for b in blocks {
        w.write_all(&(b.len() as u32).to_be_bytes()).await?;
        w.write_all(b).await?;
    }
    w.flush().await?;
    let got = receiver.await.map_err(|e| Error::network("bench", e))??;
    let seconds = start.elapsed().as_secs_f64();
    let _ = stream.close().await;
    s_task.abort();
    c_task.abort();
    if got != total {
        return Err(Error::network(
            "bench",
            format!("copied {got} of {total} bytes"),
        ));
    }
    let wire = proxy.as_ref().map_or(0, |p| p.bytes());
    Ok((
        CopyStats {
            seconds,
            bytes: total,
        },
        wire,
    ))
}

/// Copies `blocks` over a plain loopback TCP socket with the same framing
/// and per-block hashing as [`bare_stream_copy`].
pub async fn raw_tcp_copy(blocks: &[Bytes]) -> Result<CopyStats> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let n = blocks.len();
    let receiver = tokio::spawn(async move {
        let (s, _) = listener.accept().await?;
        let mut s = tokio::io::BufReader::with_capacity(256 << 10, s);
        let mut got = 0u64;
        let mut len = [0u8; 4];
        let mut buf = Vec::new();
        for _ in 0..n {
            s.read_exact(&mut len).await?;
            buf.resize(u32::from_be_bytes(len) as usize, 0);
            s.read_exact(&mut buf).await?;
            std::hint::black_box(Cid::of(&buf));
            got += buf.len() as u64;
        }
        Ok::<_, std::io::Error>(got)
    });
    let s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let start = Instant::now();
    let mut w = tokio::io::BufWriter::with_capacity(256 << 10, s);
    for b in blocks {
        w.write_all(&(b.len() as u32).to_be_bytes()).await?;
        w.write_all(b).await?;
    }
    w.flush().await?;
    let got = receiver.await.map_err(|e| Error::network("bench", e))??;
    let total: u64 = blocks.iter().map(|b| b.len() as u64).sum();
    if got != total {
        return Err(Error::network(
            "bench",
            format!("copied {got} of {total} bytes"),
        ));
    }
    Ok(CopyStats {
        seconds: start.elapsed().as_secs_f64(),
        bytes: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback.
    async fn echo() -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// One round trip through `relay`: the bytes come back whole; returns
    /// its time.
    async fn round_trip(relay: &CountingProxy, msg: &[u8]) -> Duration {
        let mut s = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
        let start = Instant::now();
        s.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, msg);
        start.elapsed()
    }

    #[tokio::test]
    async fn a_delayed_link_holds_each_direction_and_counts_every_byte() {
        let target = echo().await;
        let link = Link {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            rate: None,
            delay: Duration::from_millis(40),
        };
        let relay = CountingProxy::start_with(target, link).await.unwrap();
        let msg = vec![7u8; 100_000];
        let rtt = tokio::time::timeout(Duration::from_secs(30), round_trip(&relay, &msg))
            .await
            .expect("round trip within 30 s");
        // Both directions are held at least the delay (a lower bound holds
        // however loaded the machine is).
        assert!(rtt >= Duration::from_millis(80), "round trip {rtt:?}");
        assert_eq!(relay.bytes(), 200_000);

        let plain = CountingProxy::start(target).await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), round_trip(&plain, &msg))
            .await
            .expect("round trip within 30 s");
        assert_eq!(plain.bytes(), 200_000);
    }
}
