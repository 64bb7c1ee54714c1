//! Records the hook sends from inside, received on the run's hook socket and written to the
//! audit log marked as reported from inside the sandbox (the agent can run the hook binary
//! itself: they show what was decided, not who asked).

use crate::supervisor::audit_sink::AuditSink;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

const MAX_LINE: u64 = 64 * 1024;

pub struct ReceiverHandle {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl ReceiverHandle {
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

pub fn serve(listener: UnixListener, audit: Option<AuditSink>) -> ReceiverHandle {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let _ = listener.set_nonblocking(true);
    let thread = std::thread::spawn(move || {
        while !stop2.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut reader = BufReader::new(stream.take(16 * MAX_LINE));
                    let mut line = String::new();
                    while reader.read_line(&mut line).unwrap_or(0) > 0 {
                        if let Ok(serde_json::Value::Object(record)) = serde_json::from_str(&line)
                            && let Some(audit) = &audit
                        {
                            let kind = record
                                .get("kind")
                                .and_then(|k| k.as_str())
                                .unwrap_or("hook")
                                .to_string();
                            audit.record("sandbox", &kind, &record);
                        }
                        line.clear();
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    ReceiverHandle { stop, thread }
}
