//! The Rust description of one charon and the files generated from it, and lab
//! certificates made with strongSwan's `pki`.

use std::fmt::Write as _;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use super::{CHARON_PLUGINS, ESP_PROPOSALS, IKE_PROPOSALS, RESPONDER_CONNECTION, TOOL_PLUGINS};
use crate::netns::{Netns, find_tool, os};

/// Which side of IKE this charon plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The client: starts one IKE SA per tunnel towards `remote`.
    Initiator {
        /// The responder's address (`remote_addrs`).
        remote: IpAddr,
        /// Ask for inner addresses ([`CharonConfig::vips`], by default `::`); needed with
        /// kernel-libipsec.
        request_virtual_ip: bool,
    },
    /// The concentrator: accepts tunnels from any initiator whose certificate chains to a
    /// configured CA.
    Responder {
        /// Inner addresses handed to initiators that ask (`pools`), e.g. `fd00:c1::100/120`.
        pool6: Option<String>,
    },
}

/// A tunnel: one IKE connection (initiator) or one child of [`RESPONDER_CONNECTION`]
/// (responder), named after it, with one child SA of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunnel {
    /// Connection and child name, e.g. [`INFRASTRUCTURE`](super::INFRASTRUCTURE).
    pub name: String,
    /// The corporate side's selectors (CIDR): the initiator's `remote_ts`, the responder's
    /// `local_ts`. The client side is `dynamic` (its virtual IP, or its address).
    pub corporate_ts: Vec<String>,
}

impl Tunnel {
    /// A tunnel named `name` covering the corporate prefixes `ts`.
    pub fn new(name: &str, ts: &[&str]) -> Tunnel {
        Tunnel {
            name: name.to_owned(),
            corporate_ts: ts.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

/// A charon's credentials: its certificate (PEM, leaf first; further certificates in the
/// file are loaded as intermediates), its private key, and the CAs it trusts for the peer.
/// Either [`LabCerts`] or `gate64 certs` (ipsec.pem/.key, clients-ca.pem, ...) provide them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPaths {
    /// Trust anchors for the peer's certificate (`swanctl/x509ca`).
    pub cas: Vec<PathBuf>,
    /// Own certificate, leaf first (`swanctl/x509`).
    pub cert: PathBuf,
    /// Own private key, any type swanctl reads (`swanctl/private`).
    pub key: PathBuf,
}

impl CertPaths {
    /// Credentials from one trust anchor, a certificate and its key.
    pub fn new(ca: impl Into<PathBuf>, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        CertPaths {
            cas: vec![ca.into()],
            cert: cert.into(),
            key: key.into(),
        }
    }
}

/// Everything that goes into one charon's `strongswan.conf` and `swanctl.conf`.
#[derive(Debug, Clone, PartialEq)]
pub struct CharonConfig {
    /// Initiator or responder.
    pub role: Role,
    /// `local_addrs`; `None` = any (the source address the route gives).
    pub local_addr: Option<IpAddr>,
    /// Own certificate and key, trusted CAs.
    pub certs: CertPaths,
    /// Our identity (`local.id`); `None`: charon's default, the certificate's subject DN. A
    /// responder whose initiators ask for its address or name in IDr needs it set to that.
    pub local_id: Option<String>,
    /// The identity the peer must prove (`remote.id`); `%any` accepts any identity whose
    /// certificate chains to a trusted CA (the initiator then sends no IDr).
    pub remote_id: String,
    /// IKE proposals, e.g. [`IKE_PROPOSALS`].
    pub ike_proposals: Vec<String>,
    /// ESP proposals, e.g. [`ESP_PROPOSALS`].
    pub esp_proposals: Vec<String>,
    /// The tunnels, e.g. infrastructure and intranet.
    pub tunnels: Vec<Tunnel>,
    /// Liveness check interval (`dpd_delay`).
    pub dpd_delay: Duration,
    /// IKE SA rekey interval (`rekey_time`); `None` = strongSwan's default (4 h).
    pub ike_rekey: Option<Duration>,
    /// IKE SA reauthentication interval (`reauth_time`, with `over_time` a tenth of it and no
    /// `rand_time`, so that an AUTH_LIFETIME shorter than strongSwan's default `over_time`
    /// does not make it reauthenticate at once, again and again); `None` = never, unless
    /// the responder announces AUTH_LIFETIME.
    pub ike_reauth: Option<Duration>,
    /// Child SA rekey interval (`rekey_time`); `None` = strongSwan's default (1 h).
    pub child_rekey: Option<Duration>,
    /// First IKE retransmission timeout (`retransmit_timeout`, strongSwan's default 4 s):
    /// shorter, so a first packet lost while Teredo sets up its path costs little.
    pub retransmit_timeout: Duration,
    /// charon's log level for the IKE subsystem (`-1`..`4`; 2 shows every message).
    pub ike_log_level: i8,
    /// An RFC 4739 second authentication round (`local-2`) on some tunnels.
    pub second_auth: Option<SecondAuth>,
    /// The virtual IPs an initiator asks for (`vips`): `::` (an IPv6 address), or e.g.
    /// `0.0.0.0,::` for one of each family.
    pub vips: String,
    /// `signature_authentication` (strongSwan's default `yes`): `false` makes charon send no
    /// SIGNATURE_HASH_ALGORITHMS and use only the classic AUTH methods (RSA: method 1, SHA-1),
    /// as clients without RFC 7427 do.
    pub signature_authentication: bool,
}

/// A second authentication round (RFC 4739): the initiator proves `cert` after its own
/// certificate (`local-1`) on the tunnels named in `tunnels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecondAuth {
    /// The second certificate (PEM, leaf only).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The tunnels (connection names) that run the second round.
    pub tunnels: Vec<String>,
}

/// The second certificate's file name in `swanctl/x509` (its key is `private/second.key`).
pub(super) const SECOND_CERT: &str = "second.pem";

impl CharonConfig {
    /// An initiator towards `remote` asking for a virtual IP, with one connection per tunnel.
    pub fn initiator(remote: IpAddr, certs: CertPaths, tunnels: Vec<Tunnel>) -> CharonConfig {
        CharonConfig::with_role(
            Role::Initiator {
                remote,
                request_virtual_ip: true,
            },
            None,
            certs,
            tunnels,
        )
    }

    /// A responder on `local` (or any address) handing out inner addresses from `pool6`.
    pub fn responder(
        local: Option<IpAddr>,
        certs: CertPaths,
        tunnels: Vec<Tunnel>,
        pool6: &str,
    ) -> CharonConfig {
        CharonConfig::with_role(
            Role::Responder {
                pool6: Some(pool6.to_owned()),
            },
            local,
            certs,
            tunnels,
        )
    }

    fn with_role(
        role: Role,
        local_addr: Option<IpAddr>,
        certs: CertPaths,
        tunnels: Vec<Tunnel>,
    ) -> CharonConfig {
        CharonConfig {
            role,
            local_addr,
            certs,
            local_id: None,
            remote_id: "%any".to_owned(),
            ike_proposals: IKE_PROPOSALS.iter().map(|s| (*s).to_owned()).collect(),
            esp_proposals: ESP_PROPOSALS.iter().map(|s| (*s).to_owned()).collect(),
            tunnels,
            dpd_delay: Duration::from_secs(30),
            ike_rekey: None,
            ike_reauth: None,
            child_rekey: None,
            retransmit_timeout: Duration::from_secs(2),
            ike_log_level: 2,
            second_auth: None,
            signature_authentication: true,
            vips: "::".to_owned(),
        }
    }

    /// The `strongswan.conf` for a charon whose files live in `dir`. Settings go under
    /// `charon-systemd` (which falls back to `charon`); one setting per line, since `;` is
    /// no separator in this format.
    pub fn strongswan_conf(&self, dir: &Path) -> String {
        let dir = dir.display();
        let reuse = match self.role {
            // Pitfall 3: otherwise the second connection becomes a second child SA of the
            // first IKE SA.
            Role::Initiator { .. } => "  reuse_ikesa = no\n",
            Role::Responder { .. } => "",
        };
        let signature = if self.signature_authentication {
            ""
        } else {
            "  signature_authentication = no\n"
        };
        format!(
            "charon-systemd {{\n  load = {CHARON_PLUGINS}\n{reuse}{signature}  port = 500\n  \
             port_nat_t = 4500\n  retransmit_timeout = {rto}\n  retransmit_tries = 5\n  \
             install_routes = yes\n  install_virtual_ip = yes\n  filelog {{\n    charon {{\n      \
             path = {dir}/charon.log\n      default = 1\n      ike = {ike}\n      cfg = 2\n      \
             time_format = %H:%M:%S\n      ike_name = yes\n      flush_line = yes\n      \
             append = no\n    }}\n  }}\n  journal {{\n    default = -1\n  }}\n  plugins {{\n    \
             vici {{\n      socket = unix://{dir}/charon.vici\n    }}\n  }}\n}}\n\
             swanctl {{\n  load = {TOOL_PLUGINS}\n  socket = unix://{dir}/charon.vici\n}}\n",
            rto = self.retransmit_timeout.as_secs_f64(),
            ike = self.ike_log_level,
        )
    }

    /// The `swanctl.conf`; `cert` is the certificate's file name in `swanctl/x509`.
    pub fn swanctl_conf(&self, cert: &str) -> String {
        let mut out = String::from("connections {\n");
        match &self.role {
            Role::Initiator {
                remote,
                request_virtual_ip,
            } => {
                for tunnel in &self.tunnels {
                    let mut head = format!("    remote_addrs = {remote}\n");
                    if *request_virtual_ip {
                        let _ = writeln!(head, "    vips = {}", self.vips);
                    }
                    let child = self.child(&tunnel.name, None, Some(&tunnel.corporate_ts));
                    self.connection(&mut out, &tunnel.name, &head, cert, &child);
                }
            }
            Role::Responder { pool6 } => {
                let mut head = String::new();
                if pool6.is_some() {
                    head.push_str("    pools = vip6\n");
                }
                let children: String = self
                    .tunnels
                    .iter()
                    .map(|t| self.child(&t.name, Some(&t.corporate_ts), None))
                    .collect();
                self.connection(&mut out, RESPONDER_CONNECTION, &head, cert, &children);
            }
        }
        out.push_str("}\n");
        if let Role::Responder { pool6: Some(pool) } = &self.role {
            let _ = write!(out, "pools {{\n  vip6 {{\n    addrs = {pool}\n  }}\n}}\n");
        }
        out
    }

    fn connection(&self, out: &mut String, name: &str, head: &str, cert: &str, children: &str) {
        let _ = write!(
            out,
            "  {name} {{\n    version = 2\n{head}{local}    proposals = {props}\n    \
             unique = never\n    fragmentation = yes\n    dpd_delay = {dpd}s\n{rekey}{reauth}{locals}    \
             remote {{\n      \
             auth = pubkey\n      id = {remote_id}\n    }}\n    children {{\n{children}    }}\n  }}\n",
            local = self
                .local_addr
                .map(|a| format!("    local_addrs = {a}\n"))
                .unwrap_or_default(),
            props = self.ike_proposals.join(","),
            dpd = self.dpd_delay.as_secs(),
            rekey = self
                .ike_rekey
                .map(|d| format!("    rekey_time = {}s\n", d.as_secs()))
                .unwrap_or_default(),
            reauth = self
                .ike_reauth
                .map(|d| format!(
                    "    reauth_time = {}s\n    over_time = {}s\n    rand_time = 0s\n",
                    d.as_secs(),
                    (d.as_secs() / 10).max(1)
                ))
                .unwrap_or_default(),
            remote_id = self.remote_id,
            locals = self.locals(name, cert),
        );
    }

    /// The `local` section, or `local-1` and `local-2` when `name` runs a second round.
    fn locals(&self, name: &str, cert: &str) -> String {
        let id = self
            .local_id
            .as_ref()
            .map(|id| format!("      id = {id}\n"))
            .unwrap_or_default();
        let section = |label: &str, cert: &str, id: &str| {
            format!("    {label} {{\n      auth = pubkey\n      certs = {cert}\n{id}    }}\n")
        };
        match &self.second_auth {
            Some(second) if second.tunnels.iter().any(|t| t == name) => {
                section("local-1", cert, &id) + &section("local-2", SECOND_CERT, "")
            }
            _ => section("local", cert, &id),
        }
    }

    fn child(&self, name: &str, local: Option<&[String]>, remote: Option<&[String]>) -> String {
        let ts = |key: &str, v: Option<&[String]>| {
            v.map(|v| format!("        {key} = {}\n", v.join(",")))
                .unwrap_or_default()
        };
        format!(
            "      {name} {{\n{local}{remote}        esp_proposals = {esp}\n        mode = tunnel\n\
             {rekey}        start_action = none\n        close_action = none\n      }}\n",
            local = ts("local_ts", local),
            remote = ts("remote_ts", remote),
            esp = self.esp_proposals.join(","),
            rekey = self
                .child_rekey
                .map(|d| format!("        rekey_time = {}s\n", d.as_secs()))
                .unwrap_or_default(),
        )
    }
}

/// The key type of a certificate [`LabCerts::issue_client`] issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// RSA, 2048 bits (Windows machine certificates, Android's native client).
    Rsa2048,
    /// ECDSA on P-256.
    EcdsaP256,
}

/// Certificates made with strongSwan's `pki`: an ECDSA P-256 CA, a responder certificate
/// with the responder's address as subjectAltName, and an initiator (client) certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabCerts {
    /// The CA certificate (trusted by both sides).
    pub ca: PathBuf,
    /// The responder's certificate.
    pub responder_cert: PathBuf,
    /// The responder's private key.
    pub responder_key: PathBuf,
    /// The initiator's certificate.
    pub initiator_cert: PathBuf,
    /// The initiator's private key.
    pub initiator_key: PathBuf,
}

impl LabCerts {
    /// Generates the set into `dir` (created if missing), valid for 30 days; `pki` runs in
    /// `ns` (any namespace will do: it only needs the bounded command runner).
    pub fn generate(ns: &Netns, dir: &Path, responder_addr: IpAddr) -> Result<LabCerts> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let pki = find_tool("pki").context("`pki` not found: apt-get install strongswan-pki")?;
        let conf = write_pki_conf(dir)?;
        let run = |args: &[&str], out: &Path| -> Result<()> {
            let mut argv = vec![format!("STRONGSWAN_CONF={}", conf.display())];
            argv.push(os(&pki).to_owned());
            argv.extend(args.iter().map(|s| (*s).to_owned()));
            // `pki --pub | pki --issue` is a pipe; sh keeps it readable.
            let line = argv
                .iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ");
            let script = format!("env {line} > {}", shell_quote(os(out)));
            ns.exec_ok(&["sh", "-c", &script]).map(drop)
        };
        let p = |name: &str| dir.join(name);
        let certs = LabCerts {
            ca: p("ca.pem"),
            responder_cert: p("responder.pem"),
            responder_key: p("responder.key"),
            initiator_cert: p("initiator.pem"),
            initiator_key: p("initiator.key"),
        };
        let ca_key = p("ca.key");
        for key in [&ca_key, &certs.responder_key, &certs.initiator_key] {
            run(
                &[
                    "--gen",
                    "--type",
                    "ecdsa",
                    "--size",
                    "256",
                    "--outform",
                    "pem",
                ],
                key,
            )?;
        }
        run(
            &[
                "--self",
                "--ca",
                "--lifetime",
                "30",
                "--in",
                os(&ca_key),
                "--type",
                "ecdsa",
                "--dn",
                "CN=gate64 lab strongSwan CA",
                "--outform",
                "pem",
            ],
            &certs.ca,
        )?;
        let addr = responder_addr.to_string();
        let issue = |key: &Path, out: &Path, dn: &str, san: &str, flag: &str| {
            let pub_key = out.with_extension("pub");
            run(
                &[
                    "--pub",
                    "--in",
                    os(key),
                    "--type",
                    "ecdsa",
                    "--outform",
                    "pem",
                ],
                &pub_key,
            )?;
            run(
                &[
                    "--issue",
                    "--lifetime",
                    "30",
                    "--in",
                    os(&pub_key),
                    "--type",
                    "pub",
                    "--cacert",
                    os(&certs.ca),
                    "--cakey",
                    os(&ca_key),
                    "--dn",
                    dn,
                    "--san",
                    san,
                    "--flag",
                    flag,
                    "--outform",
                    "pem",
                ],
                out,
            )
        };
        issue(
            &certs.responder_key,
            &certs.responder_cert,
            &format!("CN={addr}"),
            &addr,
            "serverAuth",
        )?;
        issue(
            &certs.initiator_key,
            &certs.initiator_cert,
            "CN=client.gate64.lab",
            "client.gate64.lab",
            "clientAuth",
        )?;
        Ok(certs)
    }

    /// Issues one more client certificate under the lab CA into the CA's directory:
    /// `<name>.pem` and `<name>.key`, subject `CN=<name>`, `name` also its DNS
    /// subjectAltName, clientAuth, valid for 30 days, with a key of `key` (`pki` writes an RSA
    /// key as PKCS#1). `name` is a DNS name (letters, digits, `-`, `.`). Returns the
    /// credentials an initiator proves it with.
    pub fn issue_client(&self, ns: &Netns, name: &str, key: KeyType) -> Result<CertPaths> {
        anyhow::ensure!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'),
            "client certificate name {name:?}: use a DNS name"
        );
        let dir = self
            .ca
            .parent()
            .context("the lab CA certificate has no directory")?;
        let pki = find_tool("pki").context("`pki` not found: apt-get install strongswan-pki")?;
        let conf = write_pki_conf(dir)?;
        let (cert, private) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        let (kind, size) = match key {
            KeyType::Rsa2048 => ("rsa", "2048"),
            KeyType::EcdsaP256 => ("ecdsa", "256"),
        };
        let q = |p: &Path| shell_quote(os(p));
        let script = format!(
            "export STRONGSWAN_CONF={conf}; \
             {pki} --gen --type {kind} --size {size} --outform pem > {key} && \
             {pki} --pub --in {key} --type {kind} --outform pem | \
             {pki} --issue --lifetime 30 --type pub --cacert {ca} --cakey {ca_key} \
             --dn {dn} --san {san} --flag clientAuth --outform pem > {cert}",
            conf = q(&conf),
            pki = q(&pki),
            key = q(&private),
            ca = q(&self.ca),
            ca_key = q(&dir.join("ca.key")),
            dn = shell_quote(&format!("CN={name}")),
            san = shell_quote(name),
            cert = q(&cert),
        );
        ns.exec_ok(&["sh", "-c", &script])?;
        Ok(CertPaths::new(&self.ca, cert, private))
    }

    /// The responder's credentials.
    pub fn responder(&self) -> CertPaths {
        CertPaths::new(&self.ca, &self.responder_cert, &self.responder_key)
    }

    /// The initiator's credentials.
    pub fn initiator(&self) -> CertPaths {
        CertPaths::new(&self.ca, &self.initiator_cert, &self.initiator_key)
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Writes `pki-strongswan.conf` into `dir` (which exists): the plugins strongSwan's `pki`
/// needs to issue certificates and sign CRLs with PEM keys, as `STRONGSWAN_CONF` for it.
pub fn write_pki_conf(dir: &Path) -> Result<PathBuf> {
    let conf = dir.join("pki-strongswan.conf");
    fs::write(&conf, format!("pki {{\n  load = {TOOL_PLUGINS}\n}}\n"))
        .with_context(|| format!("writing {}", conf.display()))?;
    Ok(conf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strongswan::{INFRASTRUCTURE, INTRANET};

    #[test]
    fn second_auth_splits_local_into_two_rounds_on_its_tunnels_only() {
        let certs = CertPaths::new("/c/ca.pem", "/c/cli.pem", "/c/cli.key");
        let tunnels = vec![
            Tunnel::new(INFRASTRUCTURE, &["fd00:c0::53/128"]),
            Tunnel::new(INTRANET, &["fd00:c0::/64"]),
        ];
        let mut cfg = CharonConfig::initiator("2001:db8::2".parse().unwrap(), certs, tunnels);
        cfg.second_auth = Some(SecondAuth {
            cert: "/c/user.pem".into(),
            key: "/c/user.key".into(),
            tunnels: vec![INTRANET.to_owned()],
        });
        let conf = cfg.swanctl_conf("own.pem");
        let (infra, intra) = conf.split_at(conf.find("  intranet {").unwrap());
        assert!(infra.contains("    local {\n      auth = pubkey\n      certs = own.pem\n"));
        assert!(!infra.contains("local-2"));
        assert!(intra.contains("    local-1 {\n      auth = pubkey\n      certs = own.pem\n"));
        assert!(intra.contains("    local-2 {\n      auth = pubkey\n      certs = second.pem\n"));
        assert!(!intra.contains("    local {"));
    }

    #[test]
    fn initiator_config_has_one_connection_per_tunnel() {
        let certs = CertPaths::new("/c/ca.pem", "/c/cli.pem", "/c/cli.key");
        let tunnels = vec![
            Tunnel::new(INFRASTRUCTURE, &["fd00:c0::53/128"]),
            Tunnel::new(INTRANET, &["fd00:c0::/64", "64:ff9b::/96"]),
        ];
        let cfg = CharonConfig::initiator("2001:db8::2".parse().unwrap(), certs, tunnels);
        let conf = cfg.swanctl_conf("own.pem");
        assert!(
            conf.contains("  infrastructure {\n    version = 2\n"),
            "{conf}"
        );
        assert!(conf.contains("  intranet {\n"), "{conf}");
        assert_eq!(conf.matches("vips = ::\n").count(), 2, "{conf}");
        assert!(
            conf.contains("remote_ts = fd00:c0::/64,64:ff9b::/96\n"),
            "{conf}"
        );
        assert!(!conf.contains("local_ts"), "{conf}");
        assert!(
            conf.contains(
                "proposals = aes256gcm16-prfsha256-ecp256,aes256gcm16-prfsha256-x25519\n"
            )
        );
        assert!(!conf.contains(';'));
        let ss = cfg.strongswan_conf(Path::new("/tmp/x"));
        assert!(ss.contains("reuse_ikesa = no\n"), "{ss}");
        assert!(
            ss.contains("kernel-libipsec kernel-netlink socket-default vici\n"),
            "{ss}"
        );
        assert!(ss.contains("socket = unix:///tmp/x/charon.vici\n"), "{ss}");
    }

    #[test]
    fn responder_config_has_children_and_a_pool() {
        let certs = CertPaths::new("/c/ca.pem", "/c/srv.pem", "/c/srv.key");
        let tunnels = vec![
            Tunnel::new(INFRASTRUCTURE, &["fd00:c0::53/128"]),
            Tunnel::new(INTRANET, &["fd00:c0::/64"]),
        ];
        let local = Some("2001:db8::2".parse().unwrap());
        let cfg = CharonConfig::responder(local, certs, tunnels, "fd00:c1::100/120");
        let conf = cfg.swanctl_conf("own.pem");
        assert!(
            conf.contains(&format!("  {RESPONDER_CONNECTION} {{\n")),
            "{conf}"
        );
        assert!(conf.contains("local_addrs = 2001:db8::2\n"), "{conf}");
        assert!(conf.contains("pools = vip6\n"), "{conf}");
        assert!(conf.contains("addrs = fd00:c1::100/120\n"), "{conf}");
        assert!(conf.contains("local_ts = fd00:c0::53/128\n"), "{conf}");
        assert!(
            !conf.contains("remote_ts") && !conf.contains("vips"),
            "{conf}"
        );
        assert!(!cfg.strongswan_conf(Path::new("/x")).contains("reuse_ikesa"));
    }
}
