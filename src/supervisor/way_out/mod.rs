//! What crosses back out of a run: the sweep, the watcher during the run, the patch of
//! quarantined changes, profile tampering, the output files. Never imports `net`: nothing on
//! the way out speaks to the network. May import everything below the supervisor.

pub mod output_files;
pub mod profile_check;
pub mod proposed;
pub mod recover;
pub mod sweep;
pub mod watch;
