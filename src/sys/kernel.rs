//! Kernel feature queries that need a raw system call.

use std::io;

/// The Landlock ABI version the running kernel offers: `Ok(0)` when Landlock is built in but
/// not enabled at boot or not built in at all (`EOPNOTSUPP` / `ENOSYS`).
pub fn landlock_abi_version() -> io::Result<i32> {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a NULL attribute and size 0 only returns the
    // ABI version; the kernel reads no memory from us.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if ret >= 0 {
        return Ok(i32::try_from(ret).unwrap_or(i32::MAX));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(0),
        _ => Err(err),
    }
}
