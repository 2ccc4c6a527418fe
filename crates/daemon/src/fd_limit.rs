//! The open-file limit. Every IP-HTTPS connection holds a socket, and a daemon started by
//! systemd gets a soft `RLIMIT_NOFILE` of 1,024 by default: gate64 raises its soft limit to
//! the hard one at start, and warns when even that cannot hold
//! `limits.max_iphttps_connections` (connections past it would be refused by `accept`
//! failing with EMFILE, not by gate64's own limit).

use gate64_config::Config;

/// Descriptors gate64 needs beside its IP-HTTPS connections: listeners, UDP sockets and TUN
/// queues, the control and metrics sockets, files.
const SPARE: u64 = 1024;

/// Raises the soft limit to the hard one (and to what the configuration needs, where the
/// hard limit may be raised); returns a warning when the result is too low for it.
pub fn raise(cfg: &Config) -> Option<String> {
    let want = cfg.limits.max_iphttps_connections as u64 + SPARE;
    warning(gate64_sys::resource::raise_nofile(want), cfg)
}

/// The warning for a soft limit of `limit` open files, if any.
fn warning(limit: u64, cfg: &Config) -> Option<String> {
    if !cfg.iphttps.enabled {
        return None;
    }
    let want = cfg.limits.max_iphttps_connections as u64 + SPARE;
    (limit < want).then(|| {
        format!(
            "the open-file limit (RLIMIT_NOFILE) is {limit}, below limits.max_iphttps_connections \
             ({}) + {SPARE}: IP-HTTPS connections past about {} will be refused; raise \
             LimitNOFILE= in the systemd unit (or ulimit -n) to at least {want}",
            cfg.limits.max_iphttps_connections,
            limit.saturating_sub(SPARE),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_only_with_ip_https_and_too_few_files() {
        let mut cfg = Config::lab(
            std::net::Ipv4Addr::LOCALHOST,
            std::net::Ipv4Addr::new(127, 0, 0, 2),
            3544,
        );
        cfg.limits.max_iphttps_connections = 50_000;
        assert_eq!(warning(1024, &cfg), None, "IP-HTTPS off");
        cfg.iphttps.enabled = true;
        let w = warning(20_000, &cfg).expect("a warning");
        assert!(w.contains("limits.max_iphttps_connections (50000)"), "{w}");
        assert!(w.contains("51024"), "{w}");
        assert_eq!(warning(51_024, &cfg), None);
    }

    #[test]
    fn the_soft_limit_reaches_the_hard_one() {
        let _ = raise(&Config::lab(
            std::net::Ipv4Addr::LOCALHOST,
            std::net::Ipv4Addr::new(127, 0, 0, 2),
            3544,
        ));
        let lim = gate64_sys::resource::nofile_limit().expect("getrlimit");
        assert_eq!(lim.soft, lim.hard);
    }
}
