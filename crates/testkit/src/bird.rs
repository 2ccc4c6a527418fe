//! BIRD 2 in a network namespace (scale-out with ECMP): one daemon per namespace with its own
//! configuration, control socket (`-s`) and pid file (`-P`), all in the namespace's
//! temporary directory (`../shared/docs/ha-keepalived-bird.md`).
//!
//! [`router_config`] is the router in front of the gate64 nodes: one BGP session per node
//! and address family, every learned route exported to the kernel with `merge paths on`, so
//! prefixes that several nodes announce become ECMP routes. [`node_config`] is a gate64
//! node: it announces its service addresses and the client prefixes it serves as static
//! routes to the router. Dropping a [`Bird`] stops the daemon.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::netns::{Netns, Process, find_tool, os};
use crate::wait::wait_until;

/// A BGP neighbour: its address, its AS, and our local address on the link.
#[derive(Debug, Clone)]
pub struct Neighbor<'s> {
    /// Protocol name in BIRD (letters, digits, `_`).
    pub name: &'s str,
    /// The neighbour's address (IPv4 or IPv6: the session carries that family only).
    pub address: &'s str,
    /// The neighbour's AS number.
    pub asn: u32,
}

/// The router in front of the nodes: AS `asn`, sessions with `neighbors`, ECMP into the
/// kernel (`merge paths on`, up to 16 next hops).
pub fn router_config(router_id: &str, asn: u32, neighbors: &[Neighbor<'_>]) -> String {
    let mut c = common(router_id);
    for family in ["ipv4", "ipv6"] {
        let _ = writeln!(
            c,
            "protocol kernel kernel_{family} {{\n  merge paths on limit 16;\n  \
             {family} {{ import none; export all; }};\n}}\n"
        );
    }
    for n in neighbors {
        let family = family_of(n.address);
        let _ = writeln!(
            c,
            "protocol bgp {} {{\n  local as {asn};\n  neighbor {} as {};\n  \
             hold time 3;\n  connect retry time 1;\n  error wait time 1, 2;\n  \
             {family} {{ import all; export none; }};\n}}\n",
            n.name, n.address, n.asn
        );
    }
    c
}

/// A gate64 node: AS `asn`, sessions with `neighbors` (the router), announcing `prefixes`
/// (its service addresses as /32 or /128, and its client prefixes) of the matching family.
pub fn node_config(
    router_id: &str,
    asn: u32,
    neighbors: &[Neighbor<'_>],
    prefixes: &[&str],
) -> String {
    let mut c = common(router_id);
    for family in ["ipv4", "ipv6"] {
        let _ = writeln!(c, "protocol static static_{family} {{\n  {family};");
        for p in prefixes.iter().filter(|p| family_of(p) == family) {
            let _ = writeln!(c, "  route {p} unreachable;");
        }
        c.push_str("}\n\n");
    }
    for n in neighbors {
        let family = family_of(n.address);
        let _ = writeln!(
            c,
            "protocol bgp {} {{\n  local as {asn};\n  neighbor {} as {};\n  \
             hold time 3;\n  connect retry time 1;\n  error wait time 1, 2;\n  \
             {family} {{ import none; export where proto = \"static_{family}\"; }};\n}}\n",
            n.name, n.address, n.asn
        );
    }
    c
}

fn common(router_id: &str) -> String {
    format!("router id {router_id};\nlog stderr all;\n\nprotocol device {{\n  scan time 1;\n}}\n\n")
}

fn family_of(addr: &str) -> &'static str {
    if addr.contains(':') { "ipv6" } else { "ipv4" }
}

/// A BIRD 2 daemon in one namespace.
#[derive(Debug)]
pub struct Bird<'a> {
    ns: &'a Netns,
    socket: PathBuf,
    process: Process,
}

impl<'a> Bird<'a> {
    /// Writes `config` to `<ns dir>/bird.conf` and runs `bird -f` on it in `ns`; waits (≤ 5 s)
    /// until its control socket answers.
    pub fn start(ns: &'a Netns, config: &str) -> Result<Bird<'a>> {
        let bin = find_tool("bird").context("`bird` not found: apt-get install bird2")?;
        let conf = ns.write_file("bird.conf", config)?;
        let socket = ns.dir().join("bird.ctl");
        let pid = ns.dir().join("bird.pid");
        let process = ns.spawn(
            "bird",
            &[
                os(&bin),
                "-f",
                "-c",
                os(&conf),
                "-s",
                os(&socket),
                "-P",
                os(&pid),
            ],
        )?;
        let mut bird = Bird {
            ns,
            socket,
            process,
        };
        let up = wait_until(Duration::from_secs(5), || {
            bird.birdc(&["show", "status"]).is_ok()
        });
        bird.process.ensure_running()?;
        ensure!(
            up,
            "bird's control socket did not answer within 5 s: {}",
            bird.process.log()
        );
        Ok(bird)
    }

    /// Runs `birdc -s SOCKET <args>` and returns its output.
    pub fn birdc(&self, args: &[&str]) -> Result<String> {
        let bin = find_tool("birdc").context("`birdc` not found: apt-get install bird2")?;
        let mut argv = vec![os(&bin), "-s", os(&self.socket)];
        argv.extend_from_slice(args);
        self.ns.exec_ok(&argv)
    }

    /// Whether BGP protocol `name` is `Established`.
    pub fn established(&self, name: &str) -> bool {
        self.birdc(&["show", "protocols", name])
            .is_ok_and(|s| s.contains("Established"))
    }

    /// The daemon's process (its log is BIRD's log).
    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_merges_paths_and_nodes_announce_their_prefixes() {
        let r = router_config(
            "10.0.0.1",
            65000,
            &[Neighbor {
                name: "n1v4",
                address: "10.0.1.2",
                asn: 65001,
            }],
        );
        assert!(r.contains("merge paths on"), "{r}");
        assert!(r.contains("neighbor 10.0.1.2 as 65001;"), "{r}");
        assert!(r.contains("ipv4 { import all; export none; };"), "{r}");
        let n = node_config(
            "10.0.1.2",
            65001,
            &[Neighbor {
                name: "r6",
                address: "2001:db8:f1::1",
                asn: 65000,
            }],
            &["192.0.2.1/32", "2001:db8:1::/48"],
        );
        assert!(n.contains("route 192.0.2.1/32 unreachable;"), "{n}");
        assert!(n.contains("route 2001:db8:1::/48 unreachable;"), "{n}");
        assert!(
            n.contains("ipv6 { import none; export where proto = \"static_ipv6\"; };"),
            "{n}"
        );
        assert_eq!(n.matches('{').count(), n.matches('}').count(), "{n}");
    }
}
