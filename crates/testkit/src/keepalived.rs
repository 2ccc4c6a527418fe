//! keepalived (VRRP) in a network namespace (active/passive failover).
//!
//! [`Keepalived::start`] writes a configuration from a [`Vrrp`] description into the
//! namespace's temporary directory and runs Debian's keepalived in the foreground with every
//! file there: `keepalived -n -l -f CONF -p PID -r VRRP_PID -c CHECK_PID`
//! (`../shared/docs/ha-keepalived-bird.md`). Both nodes of a pair start as `state BACKUP`
//! and the priorities decide; VRRPv3 (RFC 5798) allows the sub-second advertisement interval
//! that a short crash failover needs (the master-down interval is about three intervals).
//! Dropping a [`Keepalived`] stops it (SIGTERM: it sends a priority-0 advertisement and
//! removes its addresses); the namespace's drop kills whatever is left.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::netns::{Netns, Process, find_tool, os};
use crate::wait::wait_until;

/// One VRRP instance of a node.
#[derive(Debug, Clone)]
pub struct Vrrp<'s> {
    /// Instance name (also passed to the notify script).
    pub name: &'s str,
    /// The interface the advertisements go out of.
    pub interface: &'s str,
    /// Virtual router id, 1–255, the same on every node of the pair.
    pub vrid: u8,
    /// This node's priority, 1–254; the higher one becomes master.
    pub priority: u8,
    /// Advertisement interval in milliseconds (VRRPv3: a multiple of 10 ms).
    pub advert_ms: u32,
    /// IPv4 addresses moved with the instance (`CIDR` or `CIDR dev IFNAME`), advertised.
    pub addresses: &'s [&'s str],
    /// Addresses of the other family, or on other interfaces, moved but not advertised
    /// (`virtual_ipaddress_excluded`).
    pub excluded: &'s [&'s str],
    /// Command run on every state change with keepalived's `TYPE NAME STATE PRIORITY`
    /// appended (`notify`), e.g. `config/keepalived/gate64-notify.sh -c ...`.
    pub notify: Option<&'s str>,
}

impl Vrrp<'_> {
    /// The keepalived configuration for this instance.
    pub fn config(&self) -> String {
        let mut c = String::from(
            "global_defs {\n  script_user root\n  vrrp_version 3\n  vrrp_garp_master_repeat 3\n  \
             vrrp_garp_master_delay 1\n  vrrp_garp_master_refresh 0\n}\n\n",
        );
        let _ = writeln!(c, "vrrp_instance {} {{", self.name);
        let _ = writeln!(c, "  state BACKUP\n  interface {}", self.interface);
        let _ = writeln!(c, "  virtual_router_id {}", self.vrid);
        let _ = writeln!(c, "  priority {}", self.priority);
        let _ = writeln!(c, "  advert_int {:.2}", f64::from(self.advert_ms) / 1000.0);
        for (key, list) in [
            ("virtual_ipaddress", self.addresses),
            ("virtual_ipaddress_excluded", self.excluded),
        ] {
            if list.is_empty() {
                continue;
            }
            let _ = writeln!(c, "  {key} {{");
            for a in list {
                let _ = writeln!(c, "    {a}");
            }
            c.push_str("  }\n");
        }
        if let Some(cmd) = self.notify {
            let _ = writeln!(c, "  notify \"{cmd}\"");
        }
        c.push_str("}\n");
        c
    }
}

/// A keepalived running in one namespace.
#[derive(Debug)]
pub struct Keepalived {
    process: Process,
    dir: PathBuf,
}

impl Keepalived {
    /// Writes `vrrp`'s configuration to `<ns dir>/<label>/keepalived.conf` and starts
    /// keepalived on it in `ns`; waits (≤ 5 s) for its VRRP process's pid file.
    pub fn start(ns: &Netns, label: &str, vrrp: &Vrrp<'_>) -> Result<Keepalived> {
        let bin = find_tool("keepalived")
            .context("`keepalived` not found: apt-get install keepalived")?;
        let dir = ns.dir().join(label);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let conf = dir.join("keepalived.conf");
        std::fs::write(&conf, vrrp.config())
            .with_context(|| format!("writing {}", conf.display()))?;
        let (pid, vrrp_pid, check_pid) = (
            dir.join("keepalived.pid"),
            dir.join("vrrp.pid"),
            dir.join("check.pid"),
        );
        let mut process = ns.spawn(
            label,
            &[
                os(&bin),
                "-n",
                "-l",
                "-D",
                "-f",
                os(&conf),
                "-p",
                os(&pid),
                "-r",
                os(&vrrp_pid),
                "-c",
                os(&check_pid),
            ],
        )?;
        let up = wait_until(Duration::from_secs(5), || vrrp_pid.is_file());
        process.ensure_running()?;
        ensure!(
            up,
            "keepalived wrote no VRRP pid file within 5 s: {}",
            process.log()
        );
        Ok(Keepalived { process, dir })
    }

    /// The main process (its log is keepalived's log).
    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }

    /// The directory holding the configuration and the pid files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops keepalived gracefully (SIGTERM): it gives up mastership at once with a
    /// priority-0 advertisement and runs the notify script with `STOP`.
    pub fn stop(&mut self) {
        self.process.stop();
    }
}

/// Whether `ns` holds `addr` (an address without prefix length) on any interface.
pub fn holds_address(ns: &Netns, addr: &str) -> bool {
    ns.ip(&["-o", "addr", "show"]).is_ok_and(|s| {
        s.split_whitespace()
            .any(|w| w.split('/').next() == Some(addr))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_the_instance() {
        let v = Vrrp {
            name: "gate64",
            interface: "up0",
            vrid: 64,
            priority: 150,
            advert_ms: 200,
            addresses: &["203.0.113.1/24", "10.64.0.1/24 dev lan0"],
            excluded: &["2001:db8:100:1::1/64 dev lan0"],
            notify: Some("/x/gate64-notify.sh -c /y.toml"),
        };
        let c = v.config();
        for want in [
            "vrrp_version 3",
            "vrrp_instance gate64 {",
            "state BACKUP",
            "interface up0",
            "virtual_router_id 64",
            "priority 150",
            "advert_int 0.20",
            "    10.64.0.1/24 dev lan0\n",
            "virtual_ipaddress_excluded {\n    2001:db8:100:1::1/64 dev lan0\n",
            "notify \"/x/gate64-notify.sh -c /y.toml\"",
        ] {
            assert!(c.contains(want), "{want:?} missing in\n{c}");
        }
        let open = c.matches('{').count();
        assert_eq!(open, c.matches('}').count(), "{c}");
    }
}
