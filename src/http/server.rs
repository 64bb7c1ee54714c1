//! The accept loop shared by the proxy and the gateway: one thread per connection up to a cap,
//! a wake-up pipe so that shutdown does not depend on a connection arriving, and a registry of
//! every open socket so that shutdown can end the connections and wait for their records.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// Stack of connection threads: they hold their buffers on the heap.
pub const CONNECTION_STACK: usize = 256 * 1024;

/// Connections served at once by one proxy or gateway; beyond it they are refused at once.
pub const MAX_CONNECTIONS: usize = 256;

/// A socket a connection uses, kept so that shutdown can unblock the thread reading from it.
pub enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn shutdown(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

/// The sockets of one connection.
#[derive(Clone)]
pub struct Sockets {
    inner: Arc<Mutex<Vec<Sock>>>,
    stopping: Arc<AtomicBool>,
}

impl Sockets {
    /// Keeps a handle on `sock` so shutdown can close it; if shutdown has begun, closes it now.
    pub fn register(&self, sock: Sock) {
        if self.stopping.load(Ordering::SeqCst) {
            sock.shutdown();
        }
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sock);
    }

    fn shutdown_all(&self) {
        for sock in self
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            sock.shutdown();
        }
    }
}

pub trait Listen: AsFd + Send + 'static {
    type Stream: Send + 'static;
    fn accept_stream(&self) -> io::Result<Self::Stream>;
    fn sock(stream: &Self::Stream) -> io::Result<Sock>;
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
    fn stream_blocking(stream: &Self::Stream) -> io::Result<()>;
}

impl Listen for TcpListener {
    type Stream = TcpStream;
    fn accept_stream(&self) -> io::Result<TcpStream> {
        self.accept().map(|(s, _)| s)
    }
    fn sock(stream: &TcpStream) -> io::Result<Sock> {
        stream.try_clone().map(Sock::Tcp)
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        TcpListener::set_nonblocking(self, on)
    }
    fn stream_blocking(stream: &TcpStream) -> io::Result<()> {
        stream.set_nonblocking(false)
    }
}

impl Listen for UnixListener {
    type Stream = UnixStream;
    fn accept_stream(&self) -> io::Result<UnixStream> {
        self.accept().map(|(s, _)| s)
    }
    fn sock(stream: &UnixStream) -> io::Result<Sock> {
        stream.try_clone().map(Sock::Unix)
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        UnixListener::set_nonblocking(self, on)
    }
    fn stream_blocking(stream: &UnixStream) -> io::Result<()> {
        stream.set_nonblocking(false)
    }
}

/// Why a connection is turned away without being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `MAX_CONNECTIONS` are being served.
    Full,
    /// It was still waiting in the listen queue when shutdown began.
    ShuttingDown,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::Full => "refused: every connection slot is busy",
            Refused::ShuttingDown => "refused: the run is ending",
        })
    }
}

/// What a server does with each connection; `refuse` answers (and records) one turned away.
pub trait Handler: Send + Sync + 'static {
    type Stream;
    fn handle(&self, stream: Self::Stream, sockets: &Sockets);
    fn refuse(&self, stream: Self::Stream, why: Refused);
}

/// A connection being served: its sockets (to close at shutdown) and its thread (to join).
struct Connection {
    sockets: Sockets,
    thread: JoinHandle<()>,
}

struct Shared {
    connections: Mutex<HashMap<u64, Connection>>,
    stopping: Arc<AtomicBool>,
}

/// A running accept loop. Dropping it without `shutdown` leaves it running.
pub struct Server {
    wake: Option<io::PipeWriter>,
    accept: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Server {
    pub fn start<L, H>(name: &str, listener: L, handler: H) -> Server
    where
        L: Listen,
        H: Handler<Stream = L::Stream>,
    {
        let shared = Arc::new(Shared {
            connections: Mutex::new(HashMap::new()),
            stopping: Arc::new(AtomicBool::new(false)),
        });
        let (wake_read, wake_write) = match io::pipe() {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(error = %e, "cannot create the wake-up pipe; {name} not started");
                return Server {
                    wake: None,
                    accept: None,
                    shared,
                };
            }
        };
        let thread_shared = shared.clone();
        let thread_name = name.to_owned();
        let accept = std::thread::Builder::new()
            .name(format!("stepproof-{name}"))
            .spawn(move || accept_loop(&thread_name, listener, wake_read, handler, thread_shared));
        let accept = match accept {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the {name} thread");
                None
            }
        };
        Server {
            wake: Some(wake_write),
            accept,
            shared,
        }
    }

    /// Tells the accept loop to stop, without waiting for it: a caller ending several servers
    /// tells each first, so that they wind down together.
    pub fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(mut wake) = self.wake.take() {
            let _ = wake.write_all(b"x");
        }
    }

    /// Stops accepting, closes every open connection, and waits for every connection thread,
    /// so that every record has been sent when it returns.
    pub fn shutdown(mut self) {
        self.stop();
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let connections: Vec<_> = self
            .shared
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, connection)| connection)
            .collect();
        for connection in &connections {
            connection.sockets.shutdown_all();
        }
        for connection in connections {
            let _ = connection.thread.join();
        }
    }
}

fn accept_loop<L, H>(name: &str, listener: L, wake: io::PipeReader, handler: H, shared: Arc<Shared>)
where
    L: Listen,
    H: Handler<Stream = L::Stream>,
{
    // Non-blocking so that a connection reset between poll and accept cannot hang the loop.
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!(error = %e, "{name}: cannot make the listener non-blocking");
        return;
    }
    let handler = Arc::new(handler);
    let next_id = AtomicU64::new(0);
    loop {
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(wake.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                tracing::error!(error = %e, "{name}: poll failed; no longer accepting");
                return;
            }
        }
        if fds[1].any().unwrap_or(true) || shared.stopping.load(Ordering::SeqCst) {
            // Connections already queued are answered too, so each still leaves a record.
            while let Ok(stream) = listener.accept_stream() {
                if L::stream_blocking(&stream).is_ok() {
                    handler.refuse(stream, Refused::ShuttingDown);
                }
            }
            return;
        }
        let stream = match listener.accept_stream() {
            Ok(stream) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "{name}: accept failed");
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        if L::stream_blocking(&stream).is_err() {
            continue;
        }
        let mut connections = shared
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        connections.retain(|_, connection| !connection.thread.is_finished());
        if connections.len() >= MAX_CONNECTIONS {
            drop(connections);
            handler.refuse(stream, Refused::Full);
            continue;
        }
        let sockets = Sockets {
            inner: Arc::new(Mutex::new(Vec::new())),
            stopping: shared.stopping.clone(),
        };
        if let Ok(sock) = L::sock(&stream) {
            sockets.register(sock);
        }
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let conn_handler = handler.clone();
        let conn_sockets = sockets.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("stepproof-{name}-conn"))
            .stack_size(CONNECTION_STACK)
            .spawn(move || conn_handler.handle(stream, &conn_sockets));
        match spawned {
            Ok(thread) => {
                connections.insert(id, Connection { sockets, thread });
            }
            Err(e) => {
                // The stream moved into the failed closure and is closed with it.
                tracing::warn!(error = %e, "{name}: cannot start a connection thread");
            }
        }
    }
}
