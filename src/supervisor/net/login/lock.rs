//! The refresh lock Claude Code takes (a directory beside the store, touched while held, taken
//! over when stale), so that no two refreshers spend one refresh token.

use super::{LOCK_DIR, LOCK_STALE, LOCK_TOUCH, LOCK_WAIT, LoginError};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use std::{fs, io};

/// Claude Code's two refresh locks, held: `<claude_dir>/.oauth_refresh.lock` and the legacy
/// `<realpath(claude_dir)>.lock`, both directories (mkdir is atomic), touched every 5 s while
/// held and removed on drop. A lock whose mtime is older than 60 s is stale and broken.
pub struct RefreshLock {
    dirs: Vec<PathBuf>,
    stop: Arc<AtomicBool>,
    toucher: Option<std::thread::JoinHandle<()>>,
}

impl RefreshLock {
    /// Takes both locks, waiting while another holder keeps them fresh.
    pub fn acquire(claude_dir: &Path) -> Result<RefreshLock, LoginError> {
        let real = claude_dir
            .canonicalize()
            .unwrap_or_else(|_| claude_dir.to_path_buf());
        let mut legacy = real.into_os_string();
        legacy.push(".lock");
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let mut lock = RefreshLock {
            dirs: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            toucher: None,
        };
        for dir in [claude_dir.join(LOCK_DIR), PathBuf::from(legacy)] {
            take_dir_lock(&dir, deadline)?;
            lock.dirs.push(dir);
        }
        let (dirs, stop) = (lock.dirs.clone(), lock.stop.clone());
        lock.toucher = Some(std::thread::spawn(move || {
            let step = Duration::from_millis(100);
            let mut since = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(step);
                since += step;
                if since >= LOCK_TOUCH {
                    since = Duration::ZERO;
                    for dir in &dirs {
                        touch(dir);
                    }
                }
            }
        }));
        Ok(lock)
    }
}

impl Drop for RefreshLock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(toucher) = self.toucher.take() {
            let _ = toucher.join();
        }
        for dir in self.dirs.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}

fn touch(dir: &Path) {
    if let Ok(file) = File::open(dir) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// `mkdir` the lock; a lock older than the stale time is removed and taken; a fresh one is
/// waited for until `deadline`.
fn take_dir_lock(dir: &Path, deadline: std::time::Instant) -> Result<(), LoginError> {
    loop {
        match fs::create_dir(dir) {
            Ok(()) => {
                // Invoked as root for a user: the lock is the user's, as Claude Code's would be.
                if nix::unistd::geteuid().is_root()
                    && let Some(parent) = dir.parent()
                    && let Ok(meta) = fs::metadata(parent)
                {
                    let _ = std::os::unix::fs::lchown(dir, Some(meta.uid()), Some(meta.gid()));
                }
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(LoginError::Lock {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        }
        let age = fs::symlink_metadata(dir)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok());
        match age {
            Some(age) if age > LOCK_STALE => {
                tracing::info!(lock = %dir.display(), "breaking a stale refresh lock");
                let _ = fs::remove_dir(dir);
                continue;
            }
            None => continue, // gone meanwhile (or its clock is ahead): try again
            Some(_) => {}
        }
        if std::time::Instant::now() >= deadline {
            return Err(LoginError::LockBusy {
                path: dir.to_path_buf(),
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
