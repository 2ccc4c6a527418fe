//! Open vSwitch's userspace datapath as a GRE peer in a network namespace: the
//! recipe of `../shared/docs/interop-ovs-gre.md`, checked on this machine (no kernel GRE or
//! OVS module needed).
//!
//! [`Ovs::start`] runs `ovsdb-server` and `ovs-vswitchd` inside the namespace with every
//! file (database, sockets, pid files, logs) in a directory of the namespace's own temporary
//! directory; dropping the [`Ovs`] stops both by their pid files, and the namespace's own
//! drop kills whatever is left, so a failing test leaves nothing running.
//! [`Ovs::l3_gre_peer`] builds the two bridges: `br-phy` holding the underlay port and the
//! underlay address, `br-int` holding an L3 (`packet_type=legacy_l3`) GRE port with or
//! without a key and the site's internal port, with the flows that move IPv4 and IPv6
//! between them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::Netns;

/// The MAC the site host uses as its next hop towards the tunnel (answered by no one: a
/// static neighbour entry points at it and the flows take every IP packet).
pub const SITE_GATEWAY_MAC: &str = "02:00:00:00:00:01";

/// A running Open vSwitch in one namespace.
pub struct Ovs<'a> {
    ns: &'a Netns,
    dir: PathBuf,
}

/// An L3 GRE peer: the site behind Open vSwitch and its tunnel to gate64.
#[derive(Debug, Clone)]
pub struct GrePeer<'s> {
    /// The underlay veth in the namespace (becomes a port of `br-phy`).
    pub underlay_port: &'s str,
    /// Open vSwitch's underlay address with prefix length (on `br-phy`), e.g. `203.0.113.2/24`.
    pub underlay_cidr: &'s str,
    /// gate64's underlay address (the tunnel's `remote_ip`).
    pub remote_ip: &'s str,
    /// The GRE key, or none.
    pub key: Option<u32>,
    /// The site host's addresses on the internal port `site` (IPv4 and IPv6, with prefix).
    pub site_addrs: &'s [&'s str],
    /// Routes of the site towards gate64's side: (prefix, next hop on the site subnet).
    pub site_routes: &'s [(&'s str, &'s str)],
}

impl<'a> Ovs<'a> {
    /// Creates the database and starts `ovsdb-server` and `ovs-vswitchd` in `ns`.
    pub fn start(ns: &'a Netns) -> Result<Ovs<'a>> {
        let dir = ns.dir().join("ovs");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ovs = Ovs { ns, dir };
        let db = ovs.path("conf.db");
        ovs.run(&[
            "ovsdb-tool",
            "create",
            &db,
            "/usr/share/openvswitch/vswitch.ovsschema",
        ])?;
        let remote = format!("--remote=punix:{}", ovs.path("db.sock"));
        let pid = format!("--pidfile={}", ovs.path("ovsdb.pid"));
        let log = format!("--log-file={}", ovs.path("ovsdb.log"));
        let ctl = format!("--unixctl={}", ovs.path("ovsdb.ctl"));
        ovs.run(&["ovsdb-server", &db, &remote, &pid, "--detach", &log, &ctl])?;
        ovs.vsctl(&["--no-wait", "init"])?;
        let db_sock = format!("unix:{}", ovs.path("db.sock"));
        let pid = format!("--pidfile={}", ovs.path("vsd.pid"));
        let log = format!("--log-file={}", ovs.path("vsd.log"));
        let ctl = format!("--unixctl={}", ovs.path("vsd.ctl"));
        ovs.run(&["ovs-vswitchd", &db_sock, &pid, "--detach", &log, &ctl])?;
        Ok(ovs)
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).to_string_lossy().into_owned()
    }

    /// Runs an Open vSwitch command in the namespace with its files in this instance's
    /// directory; a non-zero exit is an error.
    fn run(&self, argv: &[&str]) -> Result<String> {
        let d = self.dir.to_string_lossy().into_owned();
        let env = [
            format!("OVS_RUNDIR={d}"),
            format!("OVS_LOGDIR={d}"),
            format!("OVS_DBDIR={d}"),
            format!("OVS_SYSCONFDIR={d}"),
        ];
        let mut full: Vec<&str> = vec!["env"];
        full.extend(env.iter().map(String::as_str));
        full.extend_from_slice(argv);
        self.ns.exec_ok(&full)
    }

    /// `ovs-vsctl` against this instance's database.
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        let db = format!("--db=unix:{}", self.path("db.sock"));
        let mut argv = vec!["ovs-vsctl", &db, "--timeout=20"];
        argv.extend_from_slice(args);
        self.run(&argv)
    }

    /// `ovs-ofctl -O OpenFlow15` on a bridge of this instance.
    pub fn ofctl(&self, args: &[&str]) -> Result<String> {
        let mut argv = vec!["ovs-ofctl", "-O", "OpenFlow15"];
        argv.extend_from_slice(args);
        self.run(&argv)
    }

    /// `ovs-appctl` to this instance's `ovs-vswitchd`.
    pub fn appctl(&self, args: &[&str]) -> Result<String> {
        let target = format!("--target={}", self.path("vsd.ctl"));
        let mut argv = vec!["ovs-appctl", &target];
        argv.extend_from_slice(args);
        self.run(&argv)
    }

    /// Builds the L3 GRE peer of `../shared/docs/interop-ovs-gre.md` for `p`.
    pub fn l3_gre_peer(&self, p: &GrePeer<'_>) -> Result<()> {
        let ns = self.ns;
        self.vsctl(&[
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
            "--",
            "add-port",
            "br-phy",
            p.underlay_port,
        ])?;
        ns.ip(&["addr", "flush", "dev", p.underlay_port])?;
        ns.addr_add("br-phy", p.underlay_cidr)?;
        ns.link_up("br-phy")?;
        let remote = format!("options:remote_ip={}", p.remote_ip);
        let key = p.key.map(|k| format!("options:key={k}"));
        let mut gre = vec![
            "add-br",
            "br-int",
            "--",
            "set",
            "bridge",
            "br-int",
            "datapath_type=netdev",
            "protocols=OpenFlow10,OpenFlow13,OpenFlow15",
            "--",
            "add-port",
            "br-int",
            "gre0",
            "--",
            "set",
            "interface",
            "gre0",
            "type=gre",
            &remote,
            "options:packet_type=legacy_l3",
        ];
        if let Some(k) = &key {
            gre.push(k);
        }
        gre.extend([
            "--",
            "add-port",
            "br-int",
            "site",
            "--",
            "set",
            "interface",
            "site",
        ]);
        gre.push("type=internal");
        // The site's MTU leaves room for the outer IPv4 and GRE headers on a 1500-byte
        // underlay (Open vSwitch does not fragment tunnel packets).
        let mtu = format!("mtu_request={}", site_mtu(p.key.is_some()));
        gre.push(&mtu);
        self.vsctl(&gre)?;
        for a in p.site_addrs {
            ns.addr_add("site", a)?;
        }
        ns.link_up("site")?;
        for (net, via) in p.site_routes {
            let family = if net.contains(':') { "-6" } else { "-4" };
            ns.ip(&[
                family,
                "neigh",
                "replace",
                via,
                "lladdr",
                SITE_GATEWAY_MAC,
                "dev",
                "site",
            ])?;
            ns.ip(&[family, "route", "replace", net, "via", via, "dev", "site"])?;
        }
        let remote_net = format!("{}/24", p.remote_ip);
        self.appctl(&["ovs/route/add", &remote_net, "br-phy"])?;
        self.flows()
    }

    fn flows(&self) -> Result<()> {
        let mac = self.ns.exec_ok(&["cat", "/sys/class/net/site/address"])?;
        let mac = mac.trim();
        ensure!(mac.len() == 17, "site MAC {mac:?}");
        self.ofctl(&["del-flows", "br-int"])?;
        for flow in [
            "in_port=site,ip,actions=decap(),output:gre0".to_owned(),
            "in_port=site,ipv6,actions=decap(),output:gre0".to_owned(),
            "in_port=site,arp,actions=LOCAL".to_owned(),
            format!(
                "in_port=gre0,ip,actions=mod_dl_dst:{mac},mod_dl_src:{SITE_GATEWAY_MAC},output:site"
            ),
            format!(
                "in_port=gre0,ipv6,actions=mod_dl_dst:{mac},mod_dl_src:{SITE_GATEWAY_MAC},output:site"
            ),
        ] {
            self.ofctl(&["add-flow", "br-int", &flow])?;
        }
        Ok(())
    }

    /// What the datapath did with each flow (`tnl_pop`, `tnl_push`, `drop`): for failure
    /// reports.
    pub fn dump_flows(&self) -> String {
        self.appctl(&["dpctl/dump-flows"])
            .unwrap_or_else(|e| format!("{e:#}"))
    }

    /// Stops both daemons by their pid files.
    fn stop(&self) {
        for pidfile in ["vsd.pid", "ovsdb.pid"] {
            let Ok(text) = std::fs::read_to_string(self.dir.join(pidfile)) else {
                continue;
            };
            let Ok(pid) = text.trim().parse::<i32>() else {
                continue;
            };
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
            for _ in 0..50 {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// 1500 minus outer IPv4 (20), GRE (4) and key (4).
pub fn site_mtu(keyed: bool) -> u16 {
    1500 - 20 - 4 - if keyed { 4 } else { 0 }
}

impl Drop for Ovs<'_> {
    fn drop(&mut self) {
        self.stop();
    }
}
