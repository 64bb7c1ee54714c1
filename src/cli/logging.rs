//! Logging for both binaries: quiet by default, `-v`/`-vv`, or `STEPPROOF_LOG` directives.

/// Quiet by default; `-v` for info, `-vv` for debug, or `STEPPROOF_LOG` for anything finer.
pub fn init_logging(verbosity: u8) {
    use std::io::IsTerminal;
    // Colours only for a person at a terminal, never into a CI log or a file.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::filter::LevelFilter;
    // Only STEPPROOF_LOG needs the directive parser; a plain level is cheaper to set up, and
    // this runs before every launch.
    if let Ok(directives) = std::env::var("STEPPROOF_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new(directives))
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            // Timestamps show where launch time goes.
            .with_timer(tracing_subscriber::fmt::time::uptime())
            .try_init();
        return;
    }
    let level = match verbosity {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        _ => LevelFilter::DEBUG,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .without_time()
        .try_init();
}
