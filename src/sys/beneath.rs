//! File system calls relative to a directory descriptor that never follow a link and never
//! leave the directory: what the supervisor uses on everything a run could have written (the
//! launch scans, the persistence sweep, the quarantine, the setuid strip). A name the agent
//! planted is looked at, never through.
//!
//! No `RESOLVE_NO_XDEV`: a mount below the workspace can only be the host's own (the sandbox's
//! mounts live and die in its private mount namespace), the sandbox saw it through its recursive
//! bind and could write there, so it is walked like the rest; refusing to cross it would turn a
//! user's bind mount into a sweep error and leave what is below it unchecked.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use super::check;

/// What `fstatat` says about an entry (never its link's target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub mode: u32,
    /// A character device 0/0: in an overlay's upper layer, the mark that the entry of that
    /// name below was removed.
    whiteout: bool,
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub size: u64,
    /// 512-byte blocks allocated (`st_blocks`): far fewer than the size says is a sparse file.
    pub blocks: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stat {
    fn from_raw(st: &libc::stat) -> Stat {
        Stat {
            mode: st.st_mode,
            whiteout: st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == 0,
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            gid: st.st_gid,
            nlink: st.st_nlink,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    pub fn is_dir(&self) -> bool {
        self.kind() == libc::S_IFDIR
    }

    pub fn is_file(&self) -> bool {
        self.kind() == libc::S_IFREG
    }

    pub fn is_symlink(&self) -> bool {
        self.kind() == libc::S_IFLNK
    }

    /// An overlay's whiteout: a character device 0/0 in its upper layer says the entry of that
    /// name below was removed.
    pub fn is_whiteout(&self) -> bool {
        self.whiteout
    }
}

/// A directory for listing (`getdents`) as well as for lookups.
pub const DIR_LISTING: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY;
/// A directory only used as the base of `*at` calls (needs no read permission).
pub const DIR_LOOKUP: libc::c_int = libc::O_PATH | libc::O_DIRECTORY;
/// A file to read: a FIFO must not block the open, a terminal must not become ours.
pub const FILE_READING: libc::c_int = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;

/// `struct open_how` (libc's is non-exhaustive, so it cannot be built here).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_STRICT: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

fn cname(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name contains a NUL byte"))
}

/// One entry name: never empty, `.`, `..` or anything with a slash (those would resolve).
fn single(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a single entry name: {}", name.to_string_lossy()),
        ));
    }
    cname(name)
}

/// Opens an absolute directory the host controls (the workspace, a writable extra, the
/// config dir, the quarantine): the last component must not be a link.
pub fn open_root(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let path = super::cstring(path)?;
    // SAFETY: `path` is NUL-terminated and outlives the call; the descriptor is owned at once.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    check(fd as libc::c_long)?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dir, rel, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: `rel`
/// (relative, any number of components) is resolved inside `dir` without following a single
/// link — a link anywhere on the way is `ELOOP`, `..` above `dir` is `EXDEV`. `O_NOFOLLOW` and
/// `O_CLOEXEC` are always added; `mode` only matters with `O_CREAT`.
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        CString::from(c".")
    } else {
        cname(rel.as_os_str())?
    };
    let how = OpenHow {
        flags: (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: u64::from(mode),
        resolve: RESOLVE_STRICT,
    };
    // SAFETY: `rel` is NUL-terminated and `how` a properly laid out `open_how` whose size is
    // passed alongside; both outlive the call. The descriptor is owned at once below.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            rel.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = check(ret)? as RawFd;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)` on one entry.
pub fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Stat> {
    let name = single(name)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is NUL-terminated; `st` is a writable `stat` the kernel fills on success.
    let ret = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    check(ret as libc::c_long)?;
    // SAFETY: fstatat succeeded, so the buffer is initialized.
    let st = unsafe { st.assume_init() };
    Ok(Stat::from_raw(&st))
}

/// Starts and waits for the writeback of `fd`'s dirty pages (`sync_file_range`, data only, no
/// journal commit). Afterwards a page mapped shared and writable is write-protected again: the
/// next write through the mapping faults, and the fault updates the file's times.
pub fn write_back(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a plain syscall on a descriptor we borrow; no memory is passed.
    let ret = unsafe {
        libc::sync_file_range(
            fd.as_raw_fd(),
            0,
            0,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    };
    check(ret as libc::c_long).map(|_| ())
}

/// `fstat` of an open descriptor (`O_PATH` ones included).
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: the empty path with AT_EMPTY_PATH names `fd` itself; `st` is writable.
    let ret = unsafe {
        libc::fstatat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            st.as_mut_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    check(ret as libc::c_long)?;
    // SAFETY: fstatat succeeded, so the buffer is initialized.
    let st = unsafe { st.assume_init() };
    Ok(Stat::from_raw(&st))
}

/// `readlinkat(dir, name)`: a link's target as a string, never resolved.
pub fn read_link_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OsString> {
    let name = single(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `name` is NUL-terminated; `buf` is writable for the length passed.
    let ret = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let len = check(ret as libc::c_long)? as usize;
    buf.truncate(len);
    Ok(OsString::from_vec(buf))
}

/// One directory entry: its name and `d_type` (`DT_UNKNOWN` on some file systems).
pub type DirEntry = (OsString, u8);

/// Every entry of an open directory (`getdents64` on the descriptor itself: nothing is
/// resolved by path), without `.` and `..`.
pub fn list_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<DirEntry>> {
    list_dir_up_to(dir, usize::MAX).map(|(entries, _)| entries)
}

/// At most `max` entries of an open directory, and whether it holds more: a directory of
/// millions of names costs what `max` says, not what its writer chose.
pub fn list_dir_up_to(dir: BorrowedFd<'_>, max: usize) -> io::Result<(Vec<DirEntry>, bool)> {
    // SAFETY: lseek on an open descriptor; rewinds a directory listed before.
    let ret = unsafe { libc::lseek(dir.as_raw_fd(), 0, libc::SEEK_SET) };
    check(ret as libc::c_long)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    loop {
        // SAFETY: `buf` is writable for the length passed; the kernel writes whole
        // `linux_dirent64` records and returns how many bytes it wrote.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let len = check(ret)? as usize;
        if len == 0 {
            return Ok((out, false));
        }
        let mut at = 0;
        while at < len {
            // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name[].
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let d_type = buf[at + 18];
            let name = CStr::from_bytes_until_nul(&buf[at + 19..at + reclen])
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "malformed dirent"))?;
            let name = name.to_bytes();
            if name != b"." && name != b".." {
                if out.len() == max {
                    return Ok((out, true));
                }
                out.push((OsString::from_vec(name.to_vec()), d_type));
            }
            at += reclen;
        }
    }
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`: moves the entry itself (a link
/// is moved as a link), never over an existing one.
pub fn rename_noreplace(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
) -> io::Result<()> {
    rename(from_dir, from, to_dir, to, libc::RENAME_NOREPLACE)
}

/// `renameat(from_dir, from, to_dir, to)`: moves the entry itself over whatever `to` names (the
/// last step of an atomic rewrite: a new file renamed over the old one).
pub fn rename_over(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
) -> io::Result<()> {
    rename(from_dir, from, to_dir, to, 0)
}

/// `renameat2` with `flags` (0: `renameat`).
fn rename(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
    flags: libc::c_uint,
) -> io::Result<()> {
    let from = single(from)?;
    let to = single(to)?;
    // SAFETY: both names are NUL-terminated and outlive the call; the descriptors are open.
    let ret = unsafe {
        libc::renameat2(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    };
    check(ret as libc::c_long).map(drop)
}

/// `unlinkat(dir, name)` (`AT_REMOVEDIR` for an empty directory).
pub fn unlink_at(dir: BorrowedFd<'_>, name: &OsStr, is_dir: bool) -> io::Result<()> {
    let name = single(name)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: `name` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) };
    check(ret as libc::c_long).map(drop)
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdir_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    let name = single(name)?;
    // SAFETY: `name` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) };
    check(ret as libc::c_long).map(drop)
}

/// `symlinkat(target, dir, name)`: recreates a link (its target is only a string).
pub fn symlink_at(target: &OsStr, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let target = cname(target)?;
    let name = single(name)?;
    // SAFETY: both strings are NUL-terminated and outlive the call.
    let ret = unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) };
    check(ret as libc::c_long).map(drop)
}

/// `fchmodat2(dir, name, mode, AT_SYMLINK_NOFOLLOW)` (Linux 6.6): changes the entry itself,
/// never a link's target (on a link the kernel refuses with `EOPNOTSUPP`).
pub fn chmod_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    let name = single(name)?;
    // SAFETY: `name` is NUL-terminated and outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_fchmodat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            mode as libc::mode_t,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    check(ret).map(drop)
}

/// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`: changes the entry itself (a link's
/// own owner, never its target's).
pub fn chown_at(dir: BorrowedFd<'_>, name: &OsStr, uid: u32, gid: u32) -> io::Result<()> {
    let name = single(name)?;
    // SAFETY: `name` is NUL-terminated and outlives the call.
    let ret = unsafe {
        libc::fchownat(
            dir.as_raw_fd(),
            name.as_ptr(),
            uid,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    check(ret as libc::c_long).map(drop)
}

/// `getxattrat(2)` (Linux 6.13) has the same number on every architecture with the unified
/// syscall table; libc does not name it yet.
#[cfg(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
const SYS_GETXATTRAT: libc::c_long = 464;

#[repr(C)]
#[cfg_attr(
    not(any(
        all(target_arch = "x86_64", target_pointer_width = "64"),
        target_arch = "aarch64",
        target_arch = "riscv64"
    )),
    allow(dead_code)
)]
struct XattrArgs {
    value: u64,
    size: u32,
    flags: u32,
}

/// Whether the entry itself (never a link's target) carries the extended attribute `attr`.
/// `getxattrat(AT_SYMLINK_NOFOLLOW)`; on older kernels an `O_PATH | O_NOFOLLOW` descriptor
/// read through its `/proc/self/fd` name, which names that very inode.
pub fn has_xattr_at(dir: BorrowedFd<'_>, name: &OsStr, attr: &CStr) -> io::Result<bool> {
    let cname = single(name)?;
    let answer = |ret: libc::c_long| match check(ret) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) => Ok(false),
        Err(e) => Err(e),
    };
    #[cfg(any(
        all(target_arch = "x86_64", target_pointer_width = "64"),
        target_arch = "aarch64",
        target_arch = "riscv64"
    ))]
    {
        let mut args = XattrArgs {
            value: 0,
            size: 0,
            flags: 0,
        };
        // SAFETY: the strings are NUL-terminated; `args` is a properly laid out `xattr_args`
        // (a NULL value of size 0 only asks for the size) whose size is passed alongside.
        let ret = unsafe {
            libc::syscall(
                SYS_GETXATTRAT,
                dir.as_raw_fd(),
                cname.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
                attr.as_ptr(),
                &mut args as *mut XattrArgs,
                std::mem::size_of::<XattrArgs>(),
            )
        };
        if !(ret < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS)) {
            return answer(ret);
        }
    }
    let fd = open_beneath(dir, Path::new(name), libc::O_PATH, 0)?;
    let proc_path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both strings are NUL-terminated; a NULL buffer of size 0 only asks for the size.
    let ret = unsafe { libc::getxattr(proc_path.as_ptr(), attr.as_ptr(), std::ptr::null_mut(), 0) };
    answer(ret as libc::c_long)
}
