//! `SYMM_DEBUG` and `SYMM_DEBUG_SUBSYS`, in the spirit of NCCL's NCCL_DEBUG.
//!
//! Output goes to stderr through `log` + `env_logger`. The logger is
//! installed with `try_init`, so a host program that already installed its
//! own `log` logger keeps it (and our records flow into it).

use std::sync::Once;

use log::LevelFilter;

/// Subsystem names accepted by `SYMM_DEBUG_SUBSYS`, and the log targets
/// (module paths) that belong to each.
pub const SUBSYSTEMS: &[(&str, &[&str])] = &[
    ("INIT", &["symmcomm::comm", "symmcomm::ffi", "symmcomm::config", "symmcomm::debug", "symmcomm::init"]),
    ("BOOTSTRAP", &["symmcomm::bootstrap"]),
    ("CUDA", &["symmcomm::cuda"]),
    ("MEM", &["symmcomm::memory"]),
    // The fused matmul ops are collectives too.
    ("COLL", &["symmcomm::coll", "symmcomm::fused"]),
    // Every call into the libnccl.so.2 stand-in, at TRACE.
    ("API", &["symmcomm::api"]),
];

static INIT: Once = Once::new();

/// Install the logger once per process. Called at the top of every exported
/// function, so it costs one atomic load after the first call.
pub fn init() {
    INIT.call_once(|| {
        let cfg = crate::config::get();
        let level = parse_level(&cfg.debug);
        let mut builder = env_logger::Builder::new();
        builder.filter_level(LevelFilter::Off);
        for target in enabled_targets(&cfg.debug_subsys) {
            builder.filter_module(target, level);
        }
        builder.format(|buf, record| {
            use std::io::Write;
            writeln!(
                buf,
                "{}:{}:{} SYMM {} {}",
                hostname(),
                std::process::id(),
                thread_id(),
                record.level(),
                record.args()
            )
        });
        builder.target(env_logger::Target::Stderr);
        // Err means the host already installed a logger: keep theirs.
        let _ = builder.try_init();
        for w in &cfg.warnings {
            log::warn!(target: "symmcomm::config", "{w}");
        }
        log::info!(target: "symmcomm::config", "symmcomm {} settings: {:?}", env!("CARGO_PKG_VERSION"), cfg);
    });
}

/// `WARN` (default), `INFO`, `TRACE`, also `ERROR`, `DEBUG`, `NONE`/`OFF`.
pub fn parse_level(s: &str) -> LevelFilter {
    match s.trim().to_ascii_uppercase().as_str() {
        "NONE" | "OFF" | "0" => LevelFilter::Off,
        "ERROR" => LevelFilter::Error,
        "INFO" => LevelFilter::Info,
        "DEBUG" => LevelFilter::Debug,
        "TRACE" => LevelFilter::Trace,
        _ => LevelFilter::Warn,
    }
}

/// The log targets enabled by a `SYMM_DEBUG_SUBSYS` value: a comma list of
/// subsystem names (or ALL); a leading `^` inverts the selection.
pub fn enabled_targets(subsys: &str) -> Vec<&'static str> {
    let spec = subsys.trim();
    let (invert, list) = match spec.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let named: Vec<String> = list.split(',').map(|s| s.trim().to_ascii_uppercase()).filter(|s| !s.is_empty()).collect();
    let all = named.iter().any(|s| s == "ALL");
    SUBSYSTEMS
        .iter()
        .filter(|(name, _)| {
            let listed = all || named.iter().any(|n| n == name);
            listed != invert
        })
        .flat_map(|(_, targets)| targets.iter().copied())
        .collect()
}

fn hostname() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: buf is valid for its length; gethostname NUL-terminates on success.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc != 0 {
            return "?".into();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    })
}

fn thread_id() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(parse_level("info"), LevelFilter::Info);
        assert_eq!(parse_level("TRACE"), LevelFilter::Trace);
        assert_eq!(parse_level("bogus"), LevelFilter::Warn);
        assert_eq!(parse_level("NONE"), LevelFilter::Off);
    }

    #[test]
    fn subsystems() {
        let all = enabled_targets("ALL");
        assert!(all.contains(&"symmcomm::bootstrap") && all.contains(&"symmcomm::cuda"));
        assert_eq!(enabled_targets("BOOTSTRAP"), vec!["symmcomm::bootstrap"]);
        let not_boot = enabled_targets("^BOOTSTRAP");
        assert!(!not_boot.contains(&"symmcomm::bootstrap") && not_boot.contains(&"symmcomm::cuda"));
        assert_eq!(enabled_targets("init, cuda").len(), SUBSYSTEMS[0].1.len() + 1);
        assert!(enabled_targets("nothing").is_empty());
    }
}
