//! Files a user names on the command line for StepProof to read (a profile and its `extends`
//! files, an audit log): opened without waiting, accepted only as regular files, read with a
//! cap. A FIFO opened the ordinary way blocks until a writer comes, and `/dev/zero` or a huge
//! file would be read until memory runs out; both must end in a message naming the path.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` for reading and refuses anything but a regular file (after following links):
/// `O_NONBLOCK` at open, so a FIFO without a writer is refused instead of waited for. The
/// error's message says what the path is instead ("is not a regular file (a FIFO)"); callers
/// put the path in front.
pub fn open(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "of an unknown type"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is not a regular file ({what})"),
        ));
    }
    // Reads of a regular file never wait anyway; clearing the flag keeps file systems that
    // look at it (FUSE) from answering `EAGAIN`.
    clear_nonblocking(&file);
    Ok(file)
}

/// The whole of a regular file as UTF-8 text, refused when longer than `max_bytes` (only
/// `max_bytes + 1` bytes are ever read).
pub fn read_to_string(path: &Path, max_bytes: u64) -> io::Result<String> {
    let file = open(path)?;
    // Sized once (a CA bundle is a few hundred KiB: growing by doubling copies it over and over).
    let size = file.metadata()?.len().min(max_bytes).saturating_add(1);
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is larger than {}: not read", size_words(max_bytes)),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        // Where: the first byte that is not UTF-8, as an editor counts lines and columns.
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = good.iter().filter(|b| **b == b'\n').count() + 1;
        let column = good.len()
            - good
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |at| at + 1)
            + 1;
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is not UTF-8 text (line {line}, column {column}: the first byte that is not)"),
        )
    })
}

/// `4 MiB`, `64 KiB`, `100 bytes`.
pub fn size_words(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

fn clear_nonblocking(file: &File) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    if let Ok(bits) = fcntl(file, FcntlArg::F_GETFL) {
        let _ = fcntl(
            file,
            FcntlArg::F_SETFL(OFlag::from_bits_truncate(bits) & !OFlag::O_NONBLOCK),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_only_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Without O_NONBLOCK this open would wait for a writer forever.
        let err = open(&fifo).unwrap_err();
        assert_eq!(err.to_string(), "is not a regular file (a FIFO)");
        let err = open(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "is not a regular file (a character device)"
        );
        let err = open(dir.path()).unwrap_err();
        assert_eq!(err.to_string(), "is not a regular file (a directory)");

        let file = dir.path().join("f");
        std::fs::write(&file, "12345").unwrap();
        assert_eq!(read_to_string(&file, 5).unwrap(), "12345");
        let err = read_to_string(&file, 4).unwrap_err();
        assert_eq!(err.to_string(), "is larger than 4 bytes: not read");
        // A huge (sparse) file costs no more than the cap.
        let huge = dir.path().join("huge");
        File::create(&huge).unwrap().set_len(64 << 30).unwrap();
        let err = read_to_string(&huge, 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "is larger than 1 MiB: not read");
        std::fs::write(&file, b"\xff").unwrap();
        assert_eq!(
            read_to_string(&file, 5).unwrap_err().to_string(),
            "is not UTF-8 text (line 1, column 1: the first byte that is not)"
        );
        std::fs::write(&file, b"ab\ncd\xffe").unwrap();
        assert_eq!(
            read_to_string(&file, 50).unwrap_err().to_string(),
            "is not UTF-8 text (line 2, column 3: the first byte that is not)"
        );
    }
}
