//! `swanctl --list-sas` parsed into IKE SAs and their child SAs.

use std::net::IpAddr;

use anyhow::{Context, Result, bail};

/// One IKE SA from `swanctl --list-sas`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IkeSa {
    /// Connection name.
    pub name: String,
    /// `ESTABLISHED`, `CONNECTING`, `REKEYING`, ...
    pub state: String,
    /// Own address (IKE).
    pub local_host: String,
    /// Peer address (IKE).
    pub remote_host: String,
    /// Peer's IKE port (4500 after NAT detection, always with kernel-libipsec).
    pub remote_port: u16,
    /// Own identity.
    pub local_id: String,
    /// Peer identity.
    pub remote_id: String,
    /// Whether this side initiated the IKE SA.
    pub initiator: bool,
    /// IKE SPIs (initiator's, responder's).
    pub spis: (u64, u64),
    /// Virtual IPs assigned to this side.
    pub local_vips: Vec<IpAddr>,
    /// Virtual IPs assigned to the peer.
    pub remote_vips: Vec<IpAddr>,
    /// The child SAs.
    pub children: Vec<ChildSa>,
}

/// One child SA of an [`IkeSa`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChildSa {
    /// Child name.
    pub name: String,
    /// `INSTALLED`, `REKEYING`, ...
    pub state: String,
    /// ESP inside UDP (always with kernel-libipsec).
    pub udp_encap: bool,
    /// Inbound SPI.
    pub spi_in: u32,
    /// Outbound SPI.
    pub spi_out: u32,
    /// Bytes received (inner packets).
    pub bytes_in: u64,
    /// Packets received.
    pub packets_in: u64,
    /// Bytes sent (inner packets).
    pub bytes_out: u64,
    /// Packets sent.
    pub packets_out: u64,
    /// Own traffic selectors.
    pub local_ts: Vec<String>,
    /// Peer traffic selectors.
    pub remote_ts: Vec<String>,
}

impl IkeSa {
    /// Whether the IKE SA is up.
    pub fn is_established(&self) -> bool {
        self.state == "ESTABLISHED"
    }
}

impl ChildSa {
    /// Whether the child SA is installed.
    pub fn is_installed(&self) -> bool {
        self.state == "INSTALLED"
    }
}

/// The child SA named `name` in `sas`, if exactly one exists.
pub fn find_child<'a>(sas: &'a [IkeSa], name: &str) -> Option<&'a ChildSa> {
    let mut found = sas
        .iter()
        .flat_map(|s| &s.children)
        .filter(|c| c.name == name);
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// A node of swanctl's `--pretty` output: `key = value`, `key = [ items ]` or `key { ... }`.
#[derive(Debug)]
enum Node {
    Value(String),
    List(Vec<String>),
    Section(Vec<(String, Node)>),
}

/// Parses `swanctl --list-sas --pretty`: a `list-sa event { <ike name> { ... } }` per IKE
/// SA, then `list-sas reply {}`.
pub(super) fn parse_list_sas(text: &str) -> Result<Vec<IkeSa>> {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("plugin '"));
    let root = parse_section(&mut lines)?;
    let mut sas = Vec::new();
    for (key, node) in &root {
        if key != "list-sa event" {
            continue;
        }
        let Node::Section(events) = node else {
            bail!("list-sa event is not a section");
        };
        for (name, ike) in events {
            let Node::Section(fields) = ike else {
                bail!("IKE SA {name} is not a section");
            };
            sas.push(ike_sa(name, fields)?);
        }
    }
    Ok(sas)
}

fn parse_section<'l>(lines: &mut impl Iterator<Item = &'l str>) -> Result<Vec<(String, Node)>> {
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        if line == "}" {
            return Ok(out);
        }
        if let Some(key) = line.strip_suffix("{}") {
            out.push((key.trim().to_owned(), Node::Section(Vec::new())));
        } else if let Some(key) = line.strip_suffix('{') {
            out.push((key.trim().to_owned(), Node::Section(parse_section(lines)?)));
        } else if let Some((key, value)) = line.split_once(" = ") {
            let node = if value == "[" {
                let mut items = Vec::new();
                loop {
                    match lines.next() {
                        Some("]") => break,
                        Some(item) => items.push(item.to_owned()),
                        None => bail!("unterminated list {key}"),
                    }
                }
                Node::List(items)
            } else {
                Node::Value(value.to_owned())
            };
            out.push((key.to_owned(), node));
        } else {
            bail!("unexpected line {line:?}");
        }
    }
    Ok(out)
}

fn field<'n>(fields: &'n [(String, Node)], key: &str) -> Option<&'n Node> {
    fields.iter().find(|(k, _)| k == key).map(|(_, n)| n)
}

fn value(fields: &[(String, Node)], key: &str) -> String {
    match field(fields, key) {
        Some(Node::Value(v)) => v.clone(),
        _ => String::new(),
    }
}

fn list(fields: &[(String, Node)], key: &str) -> Vec<String> {
    match field(fields, key) {
        Some(Node::List(v)) => v.clone(),
        _ => Vec::new(),
    }
}

fn number(fields: &[(String, Node)], key: &str) -> Result<u64> {
    let v = value(fields, key);
    if v.is_empty() {
        return Ok(0);
    }
    v.parse().with_context(|| format!("{key} = {v:?}"))
}

fn hex<T: TryFrom<u64>>(fields: &[(String, Node)], key: &str) -> Result<T> {
    let v = value(fields, key);
    let n = u64::from_str_radix(&v, 16).with_context(|| format!("{key} = {v:?}"))?;
    T::try_from(n).map_err(|_| anyhow::anyhow!("{key} = {v:?} out of range"))
}

fn ips(items: Vec<String>) -> Result<Vec<IpAddr>> {
    items
        .iter()
        .map(|s| s.parse().with_context(|| format!("virtual IP {s:?}")))
        .collect()
}

fn ike_sa(name: &str, f: &[(String, Node)]) -> Result<IkeSa> {
    let mut children = Vec::new();
    if let Some(Node::Section(kids)) = field(f, "child-sas") {
        for (key, node) in kids {
            let Node::Section(c) = node else {
                bail!("child SA {key} is not a section");
            };
            children.push(ChildSa {
                name: value(c, "name"),
                state: value(c, "state"),
                udp_encap: value(c, "encap") == "yes",
                spi_in: hex(c, "spi-in")?,
                spi_out: hex(c, "spi-out")?,
                bytes_in: number(c, "bytes-in")?,
                packets_in: number(c, "packets-in")?,
                bytes_out: number(c, "bytes-out")?,
                packets_out: number(c, "packets-out")?,
                local_ts: list(c, "local-ts"),
                remote_ts: list(c, "remote-ts"),
            });
        }
    }
    let spi = |key| -> Result<u64> {
        if value(f, key).is_empty() {
            Ok(0)
        } else {
            hex(f, key)
        }
    };
    Ok(IkeSa {
        name: name.to_owned(),
        state: value(f, "state"),
        local_host: value(f, "local-host"),
        remote_host: value(f, "remote-host"),
        remote_port: u16::try_from(number(f, "remote-port")?).context("remote-port")?,
        local_id: value(f, "local-id"),
        remote_id: value(f, "remote-id"),
        initiator: value(f, "initiator") == "yes",
        spis: (spi("initiator-spi")?, spi("responder-spi")?),
        local_vips: ips(list(f, "local-vips"))?,
        remote_vips: ips(list(f, "remote-vips"))?,
        children,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "list-sa event {
  intranet {
    uniqueid = 2
    state = ESTABLISHED
    local-host = 2001:db8:9::1
    remote-host = 2001:db8:9::2
    remote-port = 4500
    local-id = C=CH, O=lab, CN=client
    remote-id = CN=2001:db8:9::2
    initiator = yes
    initiator-spi = ca1685df01adcb12
    responder-spi = d6887ebdc807431f
    local-vips = [
      fd00:c1::101
    ]
    child-sas {
      intranet-2 {
        name = intranet
        state = INSTALLED
        encap = yes
        spi-in = e4c82d1c
        spi-out = 34d75e03
        bytes-in = 312
        packets-in = 3
        bytes-out = 416
        packets-out = 4
        local-ts = [
          fd00:c1::101/128
        ]
        remote-ts = [
          fd00:c0::/64
        ]
      }
    }
  }
}
list-sa event {
  infrastructure {
    state = CONNECTING
    remote-port = 500
    initiator-spi = 19c8df6dfe90cb9d
    responder-spi = 0000000000000000
    child-sas {
    }
  }
}
list-sas reply {}
";

    #[test]
    fn parses_pretty_list_sas() {
        let sas = parse_list_sas(LISTING).unwrap();
        assert_eq!(sas.len(), 2);
        let sa = &sas[0];
        assert_eq!(sa.name, "intranet");
        assert!(sa.is_established() && sa.initiator);
        assert_eq!(sa.local_id, "C=CH, O=lab, CN=client");
        assert_eq!(sa.spis, (0xca16_85df_01ad_cb12, 0xd688_7ebd_c807_431f));
        assert_eq!(
            sa.local_vips,
            vec!["fd00:c1::101".parse::<IpAddr>().unwrap()]
        );
        let c = &sa.children[0];
        assert!(c.is_installed() && c.udp_encap);
        assert_eq!((c.spi_in, c.spi_out), (0xe4c8_2d1c, 0x34d7_5e03));
        assert_eq!(
            (c.bytes_in, c.packets_in, c.bytes_out, c.packets_out),
            (312, 3, 416, 4)
        );
        assert_eq!(c.remote_ts, vec!["fd00:c0::/64"]);
        assert!(!sas[1].is_established() && sas[1].children.is_empty());
        assert_eq!(find_child(&sas, "intranet"), Some(c));
        assert_eq!(find_child(&sas, "infrastructure"), None);
        assert!(parse_list_sas("list-sa event {\n  x {\n    spi-in\n").is_err());
    }
}
