//! `[ha]`: the state sync channel of an active/standby pair (`docs/scale-out.md`, "State
//! synchronisation"). Absent: no sync; the node keeps its IKE and child SAs to itself.

use std::net::SocketAddr;
use std::path::PathBuf;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::Deserialize;

use crate::error::{invalid, missing, quote};
use crate::{Config, ConfigError};

/// The shortest secret `[ha] secret_file` may hold, in bytes (trailing white space not
/// counted): the AES-256 key it stands for.
pub const HA_MIN_SECRET_LEN: usize = 32;
/// The longest secret `[ha] secret_file` may hold, in bytes.
pub const HA_MAX_SECRET_LEN: usize = 4096;
/// The prefix lengths `ha.peer_pool6` may have: those of the peer's `ipsec.pool6` (the
/// same bounds, kept equal by a test in `ipsec.rs`).
pub(crate) const PEER_POOL6_LEN: (u8, u8) = (64, 126);
/// The key the HA secret checks name.
pub(crate) const HA_SECRET_FILE: &str = "ha.secret_file";

/// `[ha]`: where this node sends its records and where it receives its peer's, who it and
/// its peer are, and the secret both share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ha {
    /// This node's id on the channel (`node_id`): part of every message header and of the
    /// keys of both directions. `1..=4294967295`, distinct from `peer_node_id`.
    pub node_id: u32,
    /// The peer's id (`peer_node_id`): the only sender whose messages are accepted.
    pub peer_node_id: u32,
    /// The UDP address and port this node receives sync messages on (`listen`).
    pub listen: SocketAddr,
    /// The peer's sync address and port (`peer`): where this node sends, and the only source
    /// it accepts messages from.
    pub peer: SocketAddr,
    /// The file holding the shared secret (`secret_file`): the same bytes on both nodes.
    pub secret_file: PathBuf,
    /// The peer's `ipsec.pool6` (`peer_pool6`), when the two nodes lease from pools of their
    /// own (two active nodes behind ECMP): an IKE SA taken over from the peer keeps its
    /// inner address, which lies there. No client of this node is leased one of its
    /// addresses. Disjoint from this node's `ipsec.pool6`. `None`: a taken-over IKE SA
    /// keeps only an address of this node's own pool (the nodes share one pool).
    pub peer_pool6: Option<Ipv6Net>,
    /// The peer's `ipsec.pool4` (`peer_pool4`), as `peer_pool6`; needs this node's
    /// `ipsec.pool4`.
    pub peer_pool4: Option<Ipv4Net>,
    /// The peer's `iphttps.prefix` (`peer_iphttps_prefix`), when the two nodes are active
    /// behind ECMP, each with its own IP-HTTPS prefix: an IP-HTTPS client of the dead peer
    /// that reconnects here gets its /64 of that prefix back when a synced IKE SA of the
    /// peer's names it with the interface id of the link's first Router Solicitation, so
    /// its SAs still match its outer address. No other /64 of it is ever leased here.
    /// Disjoint from this node's `iphttps.prefix`.
    pub peer_iphttps_prefix: Option<Ipv6Net>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHa {
    node_id: Option<u32>,
    peer_node_id: Option<u32>,
    listen: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    secret_file: Option<PathBuf>,
    peer_pool6: Option<Ipv6Net>,
    peer_pool4: Option<Ipv4Net>,
    peer_iphttps_prefix: Option<Ipv6Net>,
}

impl RawHa {
    /// The section, `None` when the file has no `[ha]`; every key is required in one.
    pub(crate) fn build(self, present: bool) -> Result<Option<Ha>, ConfigError> {
        if !present {
            return Ok(None);
        }
        let need = |key: &str, example: &str| {
            missing(
                key,
                &format!(
                    "[ha] needs all of node_id, peer_node_id, listen, peer and secret_file; e.g. {example}"
                ),
            )
        };
        Ok(Some(Ha {
            node_id: self
                .node_id
                .ok_or_else(|| need("ha.node_id", "node_id = 1"))?,
            peer_node_id: (self.peer_node_id)
                .ok_or_else(|| need("ha.peer_node_id", "peer_node_id = 2"))?,
            listen: (self.listen).ok_or_else(|| need("ha.listen", "listen = \"10.0.9.1:4501\""))?,
            peer: self
                .peer
                .ok_or_else(|| need("ha.peer", "peer = \"10.0.9.2:4501\""))?,
            secret_file: (self.secret_file)
                .ok_or_else(|| need(HA_SECRET_FILE, "secret_file = \"/etc/gate64/ha.secret\""))?,
            peer_pool6: self.peer_pool6,
            peer_pool4: self.peer_pool4,
            peer_iphttps_prefix: self.peer_iphttps_prefix,
        }))
    }
}

impl Config {
    pub(crate) fn validate_ha(&self) -> Result<(), ConfigError> {
        let Some(ha) = &self.ha else {
            return Ok(());
        };
        if !self.ipsec.configured() {
            return Err(invalid(
                "ha",
                "[ha]",
                "syncs IPsec SAs: configure [ipsec] (certificate, private_key, ca) or remove \
                 [ha]",
            ));
        }
        if ha.node_id == 0 {
            return Err(invalid("ha.node_id", 0, "must be 1..=4294967295"));
        }
        if ha.peer_node_id == 0 {
            return Err(invalid("ha.peer_node_id", 0, "must be 1..=4294967295"));
        }
        if ha.node_id == ha.peer_node_id {
            return Err(invalid(
                "ha.peer_node_id",
                ha.peer_node_id,
                "must differ from ha.node_id: each node of the pair has its own id (the keys \
                 of the two directions are made from both), e.g. 1 on one node and 2 on the \
                 other",
            ));
        }
        for (key, addr) in [("ha.listen", ha.listen), ("ha.peer", ha.peer)] {
            if addr.port() == 0 {
                return Err(invalid(
                    key,
                    quote(&addr.to_string()),
                    "needs a port, e.g. \"10.0.9.1:4501\"",
                ));
            }
        }
        if ha.peer.ip().is_unspecified() {
            return Err(invalid(
                "ha.peer",
                quote(&ha.peer.to_string()),
                "must be the peer node's own address (on a link the clients do not reach)",
            ));
        }
        if ha.listen.is_ipv4() != ha.peer.is_ipv4() {
            return Err(invalid(
                "ha.peer",
                quote(&ha.peer.to_string()),
                "must be of the same family as ha.listen (one UDP socket sends and receives)",
            ));
        }
        if ha.listen == ha.peer {
            return Err(invalid(
                "ha.peer",
                quote(&ha.peer.to_string()),
                "is ha.listen: the peer is the other node",
            ));
        }
        if !ha.secret_file.is_absolute() {
            return Err(invalid(
                HA_SECRET_FILE,
                quote(&ha.secret_file.display().to_string()),
                "must be an absolute path, e.g. \"/etc/gate64/ha.secret\"",
            ));
        }
        if let Some(peer) = ha.peer_pool6 {
            let own = self.ipsec.pool6.map(IpNet::V6);
            check_peer_pool("ha.peer_pool6", IpNet::V6(peer), own, "ipsec.pool6")?;
            let (min, max) = PEER_POOL6_LEN;
            if !(min..=max).contains(&peer.prefix_len()) {
                return Err(invalid(
                    "ha.peer_pool6",
                    quote(&peer.to_string()),
                    format!("must be a /{min} to /{max}, as the peer's ipsec.pool6 is"),
                ));
            }
        }
        if let Some(peer) = ha.peer_pool4 {
            let own = self.ipsec.pool4.map(IpNet::V4);
            check_peer_pool("ha.peer_pool4", IpNet::V4(peer), own, "ipsec.pool4")?;
        }
        if let Some(peer) = ha.peer_iphttps_prefix {
            self.check_peer_iphttps_prefix(peer, ha.peer_pool6)?;
        }
        Ok(())
    }

    /// `ha.peer_iphttps_prefix`: beside this node's own `iphttps.prefix` (IP-HTTPS on), a
    /// /1 to /64 as that key is, and apart from the other prefixes this node routes into its
    /// TUN for clients or reaches in the corporate network: it is routed there too.
    fn check_peer_iphttps_prefix(
        &self,
        peer: Ipv6Net,
        peer_pool6: Option<Ipv6Net>,
    ) -> Result<(), ConfigError> {
        const KEY: &str = "ha.peer_iphttps_prefix";
        let own = (self.iphttps.enabled)
            .then_some(self.iphttps.prefix)
            .flatten()
            .map(IpNet::V6);
        check_peer_pool(KEY, IpNet::V6(peer), own, "iphttps.prefix (IP-HTTPS on)")?;
        let value = quote(&peer.to_string());
        if !(1..=64).contains(&peer.prefix_len()) {
            return Err(invalid(
                KEY,
                value,
                "must be a /1 to /64, as the peer's iphttps.prefix is (each client gets a /64)",
            ));
        }
        let others = (self.corpnet.ipv6_prefixes.iter())
            .map(|n| (*n, "corpnet.ipv6_prefixes"))
            .chain(self.ipsec.pool6.map(|n| (n, "ipsec.pool6")))
            .chain(peer_pool6.map(|n| (n, "ha.peer_pool6")))
            .chain([(crate::teredo::teredo_prefix(), "the Teredo prefix")]);
        for (net, what) in others {
            if crate::corpnet::overlaps(&peer, &net) {
                return Err(invalid(
                    KEY,
                    value,
                    format!(
                        "overlaps {net} ({what}); the peer's IP-HTTPS clients need a prefix of their own"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The HA shared secret (`[ha] secret_file`, trailing white space not counted), `None`
    /// without `[ha]`; refused, naming the key and why, when the file cannot be read or its
    /// secret is shorter than [`HA_MIN_SECRET_LEN`] or longer than [`HA_MAX_SECRET_LEN`]
    /// bytes. The error never shows the secret. Mode and owner are checked with the other
    /// secret files ([`Config::check_files`], [`Config::check_secret_file_owners`]).
    pub fn ha_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        let Some(ha) = &self.ha else {
            return Ok(None);
        };
        let path = &ha.secret_file;
        crate::error::check_readable_file(HA_SECRET_FILE, path)?;
        let shown = || quote(&path.display().to_string());
        let len = std::fs::metadata(path)
            .map_err(|e| {
                invalid(
                    HA_SECRET_FILE,
                    shown(),
                    format!("cannot read its size: {e}"),
                )
            })?
            .len();
        if len > 2 * HA_MAX_SECRET_LEN as u64 {
            return Err(invalid(
                HA_SECRET_FILE,
                shown(),
                format!("holds {len} bytes, more than {HA_MAX_SECRET_LEN}: is it the right file?"),
            ));
        }
        let mut bytes = std::fs::read(path).map_err(|e| {
            invalid(
                HA_SECRET_FILE,
                shown(),
                format!("cannot read the file: {e}"),
            )
        })?;
        while bytes.last().is_some_and(u8::is_ascii_whitespace) {
            bytes.pop();
        }
        if bytes.len() < HA_MIN_SECRET_LEN || bytes.len() > HA_MAX_SECRET_LEN {
            return Err(invalid(
                HA_SECRET_FILE,
                shown(),
                format!(
                    "holds {} bytes of secret, not {HA_MIN_SECRET_LEN}..={HA_MAX_SECRET_LEN}; \
                     write a random one, e.g. `openssl rand -base64 48 > {}`, and copy it to \
                     both HA nodes",
                    bytes.len(),
                    path.display()
                ),
            ));
        }
        Ok(Some(bytes))
    }
}

/// `ha.peer_pool6` or `ha.peer_pool4` (`key`): a prefix without host bits, beside this
/// node's own pool of the family (`own`, `own_key`), which it must not overlap: an address
/// in both could be leased here and taken over from the peer at once.
fn check_peer_pool(
    key: &str,
    peer: IpNet,
    own: Option<IpNet>,
    own_key: &str,
) -> Result<(), ConfigError> {
    let value = quote(&peer.to_string());
    if peer.addr() != peer.network() {
        return Err(invalid(
            key,
            value,
            format!("host bits are set; did you mean {}?", peer.trunc()),
        ));
    }
    let Some(own) = own else {
        return Err(invalid(
            key,
            value,
            format!(
                "this node has no {own_key}: the peer's pool of a family is taken over only \
                 beside a pool of this node's own"
            ),
        ));
    };
    if own.contains(&peer) || peer.contains(&own) {
        return Err(invalid(
            key,
            value,
            format!(
                "overlaps this node's {own_key} {own}: each node leases from its own pool, \
                 and this key names the peer's"
            ),
        ));
    }
    Ok(())
}

/// What an `[ha]` key's value looks like, for type errors.
pub(crate) fn expected_form(path: &str) -> Option<&'static str> {
    Some(match path {
        "ha.node_id" | "ha.peer_node_id" => "a whole number 1..=4294967295, e.g. 1",
        "ha.listen" | "ha.peer" => "an address and port in quotes, e.g. \"10.0.9.1:4501\"",
        "ha.secret_file" => "a file path in quotes, e.g. \"/etc/gate64/ha.secret\"",
        "ha.peer_pool6" => "an IPv6 prefix in quotes, e.g. \"fd00:c1::80:0/105\"",
        "ha.peer_pool4" => "an IPv4 prefix in quotes, e.g. \"10.77.128.0/17\"",
        "ha.peer_iphttps_prefix" => "an IPv6 prefix in quotes, e.g. \"2001:db8:2::/48\"",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use crate::Config;

    const BASE: &str = "[teredo]\nserver_addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n\
        [corpnet]\nipv6_prefixes = [\"2001:db8:100::/48\"]\naddress6 = \"2001:db8:100::1\"\n\
        [ipsec]\ncertificate = \"/etc/gate64/ike.pem\"\nprivate_key = \"/etc/gate64/ike.key\"\n\
        ca = \"/etc/gate64/clients-ca.pem\"\npool6 = \"fd00:c1::100/120\"\n";
    const HA: &str = "[ha]\nnode_id = 1\npeer_node_id = 2\nlisten = \"10.0.9.1:4501\"\n\
        peer = \"10.0.9.2:4501\"\nsecret_file = \"/etc/gate64/ha.secret\"\n";

    fn with(ha: &str) -> Result<Config, crate::ConfigError> {
        Config::from_toml_str(&format!("{BASE}{ha}"))
    }

    #[test]
    fn without_ipsec_the_section_is_refused() {
        let bare = BASE.split("[ipsec]").next().unwrap();
        let e = Config::from_toml_str(&format!("{bare}{HA}")).unwrap_err();
        assert_eq!(e.key(), Some("ha"), "{e}");
        assert!(e.to_string().contains("configure [ipsec]"), "{e}");
    }

    #[test]
    fn absent_is_none_and_a_full_section_is_read() {
        assert_eq!(with("").unwrap().ha, None);
        let ha = with(HA).unwrap().ha.unwrap();
        assert_eq!((ha.node_id, ha.peer_node_id), (1, 2));
        assert_eq!(ha.listen.to_string(), "10.0.9.1:4501");
        assert_eq!(ha.peer.to_string(), "10.0.9.2:4501");
        assert_eq!(ha.secret_file.to_str(), Some("/etc/gate64/ha.secret"));
    }

    #[test]
    fn wrong_sections_are_refused_with_key_and_reason() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("node_id = 1\n", "", "ha.node_id", "needs all of"),
            ("peer_node_id = 2\n", "", "ha.peer_node_id", "needs all of"),
            ("node_id = 1\n", "node_id = 0\n", "ha.node_id", "1..="),
            (
                "peer_node_id = 2\n",
                "peer_node_id = 1\n",
                "ha.peer_node_id",
                "differ",
            ),
            (
                "listen = \"10.0.9.1:4501\"\n",
                "listen = \"10.0.9.1:0\"\n",
                "ha.listen",
                "needs a port",
            ),
            (
                "peer = \"10.0.9.2:4501\"\n",
                "peer = \"0.0.0.0:4501\"\n",
                "ha.peer",
                "own address",
            ),
            (
                "peer = \"10.0.9.2:4501\"\n",
                "peer = \"[2001:db8::2]:4501\"\n",
                "ha.peer",
                "same family",
            ),
            (
                "peer = \"10.0.9.2:4501\"\n",
                "peer = \"10.0.9.1:4501\"\n",
                "ha.peer",
                "is ha.listen",
            ),
            (
                "secret_file = \"/etc/gate64/ha.secret\"\n",
                "secret_file = \"ha.secret\"\n",
                "ha.secret_file",
                "absolute path",
            ),
            (
                "node_id = 1\n",
                "node_id = \"one\"\n",
                "ha.node_id",
                "whole number",
            ),
            (
                "node_id = 1\n",
                "node_id = 1\nnodeid = 3\n",
                "ha.nodeid",
                "no such key",
            ),
        ];
        for (from, to, key, needle) in cases {
            let text = HA.replace(from, to);
            let e = with(&text).expect_err(&text);
            assert_eq!(e.key(), Some(*key), "{text}: {e}");
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn the_peers_pools_are_read_and_checked() {
        let ha = with(&format!("{HA}peer_pool6 = \"fd00:c1::200/120\"\n"))
            .unwrap()
            .ha
            .unwrap();
        assert_eq!(ha.peer_pool6, Some("fd00:c1::200/120".parse().unwrap()));
        assert_eq!((with(HA).unwrap().ha.unwrap().peer_pool6), None);
        let v4 = BASE.replace("pool6 =", "pool4 = \"10.77.0.0/25\"\npool6 =");
        let ha = Config::from_toml_str(&format!("{v4}{HA}peer_pool4 = \"10.77.0.128/25\"\n"))
            .unwrap()
            .ha
            .unwrap();
        assert_eq!(ha.peer_pool4, Some("10.77.0.128/25".parse().unwrap()));
        let cases: &[(&str, &str, &str)] = &[
            (
                "peer_pool6 = \"fd00:c1::100/120\"",
                "ha.peer_pool6",
                "overlaps",
            ),
            (
                "peer_pool6 = \"fd00:c1::180/121\"",
                "ha.peer_pool6",
                "overlaps",
            ),
            (
                "peer_pool6 = \"fd00:c1::/112\"",
                "ha.peer_pool6",
                "overlaps",
            ),
            (
                "peer_pool6 = \"fd00:c1::201/120\"",
                "ha.peer_pool6",
                "host bits",
            ),
            (
                "peer_pool6 = \"fd00:c2::/48\"",
                "ha.peer_pool6",
                "/64 to /126",
            ),
            (
                "peer_pool6 = \"fd00:c2::/127\"",
                "ha.peer_pool6",
                "/64 to /126",
            ),
            ("peer_pool6 = \"fd00:c2::\"", "ha.peer_pool6", "IPv6 prefix"),
            (
                "peer_pool6 = \"10.77.0.0/24\"",
                "ha.peer_pool6",
                "IPv6 prefix",
            ),
            (
                "peer_pool4 = \"10.77.0.0/24\"",
                "ha.peer_pool4",
                "no ipsec.pool4",
            ),
        ];
        for (line, key, needle) in cases {
            let e = with(&format!("{HA}{line}\n")).expect_err(line);
            assert_eq!(e.key(), Some(*key), "{line}: {e}");
            assert!(e.to_string().contains(needle), "{line}: {e}");
        }
        for (line, needle) in [
            ("peer_pool4 = \"10.77.0.0/24\"", "overlaps"),
            ("peer_pool4 = \"10.77.0.129/25\"", "host bits"),
        ] {
            let e = Config::from_toml_str(&format!("{v4}{HA}{line}\n")).expect_err(line);
            assert_eq!(e.key(), Some("ha.peer_pool4"), "{line}: {e}");
            assert!(e.to_string().contains(needle), "{line}: {e}");
        }
        let a = with(HA).unwrap();
        let b = with(&format!("{HA}peer_pool6 = \"fd00:c1::200/120\"\n")).unwrap();
        assert_eq!(a.restart_only_changes(&b), ["ha.peer_pool6"]);
    }

    #[test]
    fn the_peers_iphttps_prefix_is_read_and_checked() {
        let on = "[iphttps]\nenabled = true\ncertificate = \"/etc/gate64/i.pem\"\n\
            private_key = \"/etc/gate64/i.key\"\nprefix = \"2001:db8:2::/47\"\n";
        let key = "peer_iphttps_prefix";
        let line = |v: &str| format!("{HA}{key} = \"{v}\"\n");
        let read = |text: &str| Config::from_toml_str(&format!("{BASE}{on}{text}"));
        let ha = read(&line("2001:db8:4::/47")).unwrap().ha.unwrap();
        assert_eq!(
            ha.peer_iphttps_prefix,
            Some("2001:db8:4::/47".parse().unwrap())
        );
        assert_eq!(read(HA).unwrap().ha.unwrap().peer_iphttps_prefix, None);
        let cases: &[(&str, &str)] = &[
            ("2001:db8:2::/47", "overlaps this node's iphttps.prefix"),
            ("2001:db8::/32", "overlaps this node's iphttps.prefix"),
            ("2001:db8:3::/48", "overlaps this node's iphttps.prefix"),
            ("2001:db8:4::1/47", "host bits"),
            ("2001:db8:4::/65", "/1 to /64"),
            ("2001:db8:100:8000::/49", "corpnet.ipv6_prefixes"),
            ("fd00:c1::/64", "ipsec.pool6"),
            ("2001::/48", "the Teredo prefix"),
        ];
        for (value, needle) in cases {
            let e = read(&line(value)).expect_err(value);
            assert_eq!(e.key(), Some("ha.peer_iphttps_prefix"), "{value}: {e}");
            assert!(e.to_string().contains(needle), "{value}: {e}");
        }
        let e = read(&format!(
            "{}peer_pool6 = \"fd00:c9::/64\"\n",
            line("fd00:c9::/48")
        ))
        .unwrap_err();
        assert!(e.to_string().contains("ha.peer_pool6"), "{e}");
        // Without IP-HTTPS on this node there is no prefix of its own to stand beside.
        for text in [String::new(), on.replace("true", "false")] {
            let e = Config::from_toml_str(&format!("{BASE}{text}{}", line("2001:db8:4::/48")))
                .unwrap_err();
            assert_eq!(e.key(), Some("ha.peer_iphttps_prefix"), "{e}");
            assert!(e.to_string().contains("no iphttps.prefix"), "{e}");
        }
        let e = read(&format!("{HA}{key} = \"2001:db8:2::\"\n")).unwrap_err();
        assert!(e.to_string().contains("IPv6 prefix"), "{e}");
        let (a, b) = (read(HA).unwrap(), read(&line("2001:db8:4::/48")).unwrap());
        assert_eq!(a.restart_only_changes(&b), ["ha.peer_iphttps_prefix"]);
    }

    #[test]
    fn the_secret_is_read_checked_and_never_shown() {
        let dir = std::env::temp_dir().join(format!("gate64-ha-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ha.secret");
        let shown = path.display().to_string();
        let c = with(&HA.replace("/etc/gate64/ha.secret", &shown)).unwrap();
        let e = c.ha_secret().unwrap_err();
        assert_eq!(e.key(), Some("ha.secret_file"), "{e}");
        let short = "s".repeat(31);
        std::fs::write(&path, format!("{short}\n")).unwrap();
        let e = c.ha_secret().unwrap_err();
        assert!(e.to_string().contains("31 bytes"), "{e}");
        assert!(!e.to_string().contains(&short), "{e}");
        let secret = "k".repeat(48);
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        assert_eq!(c.ha_secret().unwrap().unwrap(), secret.as_bytes());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = c.check_accounting_files().unwrap_err();
        assert_eq!(e.key(), Some("ha.secret_file"), "{e}");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        c.check_accounting_files().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_reload_that_changes_ha_needs_a_restart() {
        let a = with(HA).unwrap();
        let b = with(&HA.replace("10.0.9.2:4501", "10.0.9.3:4501")).unwrap();
        assert_eq!(a.restart_only_changes(&b), ["ha.peer"]);
        let none = with("").unwrap();
        assert_eq!(a.restart_only_changes(&none), ["ha"]);
        assert_eq!(none.restart_only_changes(&a), ["ha"]);
        assert!(a.restart_only_changes(&a.clone()).is_empty());
    }
}
