//! `layers-exec floor|full WORKSPACE -- CMD [ARGS…]`: installs the physical floor (allow-all
//! seccomp + two Landlock rules) or the full layers (typical Landlock plan + the seccomp table +
//! limits) on itself, then execs CMD. Until `stepproof __layers` is wired, the benchmark uses this.

use std::ffi::OsString;
use std::path::PathBuf;

use stepproof::probes::{LayerSet, exec_under_layers};

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let usage = "usage: layers-exec floor|full WORKSPACE -- CMD [ARGS...]";
    if args.len() < 4 || args[2] != "--" {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let layers = match args[0].to_str() {
        Some("floor") => LayerSet::Floor,
        Some("full") => LayerSet::Full,
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let err = exec_under_layers(layers, &PathBuf::from(&args[1]), &args[3..]);
    eprintln!("layers-exec: {err}");
    std::process::exit(125);
}
