//! strongSwan as a real IKEv2/ESP peer in a network namespace: one `charon-systemd` per
//! namespace, in the foreground, with its own `strongswan.conf`, vici socket, log file and
//! `swanctl/` directory generated from a [`CharonConfig`] (interop-strongswan.md).
//!
//! This machine's kernel has neither ESP nor GCM in XFRM, so charon runs its userspace ESP
//! (`kernel-libipsec`, a TUN named `ipsec0`), which always UDP-encapsulates ESP on port 4500.
//! Consequences built into the generated configuration:
//! - an initiator asks for a virtual IP (`vips = ::`, a CFG_REQUEST for INTERNAL_IP6_ADDRESS):
//!   libipsec routes each child SA's remote selector through `ipsec0`, so the inner address
//!   must not be the IKE address;
//! - `reuse_ikesa = no` and `unique = never`: each connection gets its own IKE SA (the
//!   DirectAccess shape, two IKE SAs + two child SAs per client), and the second IKE SA's
//!   INITIAL_CONTACT cannot make the responder delete the first.
//!
//! ```no_run
//! # fn demo(cli: &gate64_testkit::Netns, corp: &gate64_testkit::Netns) -> anyhow::Result<()> {
//! use std::time::Duration;
//! use gate64_testkit::strongswan::{Charon, CharonConfig, LabCerts, Tunnel};
//! let server: std::net::IpAddr = "2001:db8:100:1::2".parse()?;
//! let tunnels = vec![
//!     Tunnel::new("infrastructure", &["fd00:c0::53/128"]),
//!     Tunnel::new("intranet", &["fd00:c0::/64"]),
//! ];
//! let certs = LabCerts::generate(corp, &corp.dir().join("certs"), server)?;
//! let responder = Charon::start(
//!     corp,
//!     "responder",
//!     CharonConfig::responder(Some(server), certs.responder(), tunnels.clone(), "fd00:c1::100/120"),
//! )?;
//! let initiator = Charon::start(cli, "initiator", CharonConfig::initiator(server, certs.initiator(), tunnels))?;
//! responder.load_all()?;
//! initiator.load_all()?;
//! initiator.initiate("infrastructure", "infrastructure", Duration::from_secs(30))?;
//! initiator.initiate("intranet", "intranet", Duration::from_secs(30))?;
//! let sas = initiator.wait_established(2, 2, Duration::from_secs(10))?;
//! println!("{:?}", sas[0].children[0].packets_out);
//! # Ok(()) }
//! ```

use std::fmt::Write as _;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::netns::{Netns, Process, find_tool, os};
use crate::wait::{wait_for, wait_until};

/// IKE proposals that worked against strongSwan 5.9 (interop-strongswan.md): AES-GCM-16-256,
/// PRF-HMAC-SHA2-256, groups 19 (ECP-256) and 31 (Curve25519).
pub const IKE_PROPOSALS: [&str; 2] = [
    "aes256gcm16-prfsha256-ecp256",
    "aes256gcm16-prfsha256-x25519",
];
/// ESP proposal: AES-GCM-16-256 (RFC 4106), no ESN.
pub const ESP_PROPOSALS: [&str; 1] = ["aes256gcm16"];
/// The DirectAccess infrastructure tunnel's name (connection and child SA).
pub const INFRASTRUCTURE: &str = "infrastructure";
/// The DirectAccess intranet tunnel's name (connection and child SA).
pub const INTRANET: &str = "intranet";
/// The responder's one connection: every tunnel is a child of it, so the responder picks the
/// child by the traffic selectors the initiator asks for (strongSwan selects the peer config
/// in IKE_AUTH by identities alone, before it sees any selector).
pub const RESPONDER_CONNECTION: &str = "clients";

/// The plugins charon loads; `kernel-libipsec` must come before `kernel-netlink` so that it
/// provides the IPsec half (userspace ESP) and netlink only the networking half.
const CHARON_PLUGINS: &str = "random nonce openssl pem pkcs1 pkcs8 pubkey x509 revocation \
     constraints aes sha1 sha2 hmac gcm kdf attr kernel-libipsec kernel-netlink socket-default \
     vici";
/// The plugins swanctl and pki need to parse keys and certificates (an explicit list also
/// keeps them from printing a line per absent default plugin).
const TOOL_PLUGINS: &str = "random nonce openssl pem pkcs1 pkcs8 pubkey x509 sha1 sha2";
/// The credential directories `swanctl --load-all` reads (strongSwan 5.9).
const SWANCTL_SUBDIRS: [&str; 13] = [
    "x509", "x509ca", "x509ocsp", "x509aa", "x509ac", "x509crl", "pubkey", "private", "rsa",
    "ecdsa", "bliss", "pkcs8", "pkcs12",
];
/// charon-systemd's path on Debian.
const CHARON_BIN: &str = "/usr/sbin/charon-systemd";
/// How long charon gets to create its vici socket and answer on it.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Timeout of swanctl commands that only talk to charon (no network exchange).
const SWANCTL_TIMEOUT: Duration = Duration::from_secs(20);
/// Lines of charon's log shown by [`Charon::log_tail`] in reports.
pub const LOG_TAIL_LINES: usize = 80;

/// Which side of IKE this charon plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Starts one IKE SA per tunnel towards `remote` (the client).
    Initiator {
        /// The responder's address (`remote_addrs`).
        remote: IpAddr,
        /// Ask for an inner IPv6 address (`vips = ::`); needed with kernel-libipsec.
        request_virtual_ip: bool,
    },
    /// Accepts tunnels from any initiator whose certificate chains to a configured CA.
    Responder {
        /// Inner addresses handed to initiators that ask (`pools`), e.g. `fd00:c1::100/120`.
        pool6: Option<String>,
    },
}

/// A tunnel: one IKE connection (initiator) or one child of [`RESPONDER_CONNECTION`]
/// (responder), named after it, with one child SA of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunnel {
    /// Connection and child name, e.g. [`INFRASTRUCTURE`].
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
    /// Child SA rekey interval (`rekey_time`); `None` = strongSwan's default (1 h).
    pub child_rekey: Option<Duration>,
    /// First IKE retransmission timeout (`retransmit_timeout`, strongSwan's default 4 s):
    /// shorter, so a first packet lost while Teredo sets up its path costs little.
    pub retransmit_timeout: Duration,
    /// charon's log level for the IKE subsystem (`-1`..`4`; 2 shows every message).
    pub ike_log_level: i8,
}

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
            remote_id: "%any".to_owned(),
            ike_proposals: IKE_PROPOSALS.iter().map(|s| (*s).to_owned()).collect(),
            esp_proposals: ESP_PROPOSALS.iter().map(|s| (*s).to_owned()).collect(),
            tunnels,
            dpd_delay: Duration::from_secs(30),
            ike_rekey: None,
            child_rekey: None,
            retransmit_timeout: Duration::from_secs(2),
            ike_log_level: 2,
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
        format!(
            "charon-systemd {{\n  load = {CHARON_PLUGINS}\n{reuse}  port = 500\n  \
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
                        head.push_str("    vips = ::\n");
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
             unique = never\n    fragmentation = yes\n    dpd_delay = {dpd}s\n{rekey}    \
             local {{\n      auth = pubkey\n      certs = {cert}\n    }}\n    remote {{\n      \
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
            remote_id = self.remote_id,
        );
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
        let conf = dir.join("pki-strongswan.conf");
        fs::write(&conf, format!("pki {{\n  load = {TOOL_PLUGINS}\n}}\n"))?;
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

    /// The responder's credentials.
    pub fn responder(&self) -> CertPaths {
        CertPaths::new(&self.ca, &self.responder_cert, &self.responder_key)
    }

    /// The initiator's credentials.
    pub fn initiator(&self) -> CertPaths {
        CertPaths::new(&self.ca, &self.initiator_cert, &self.initiator_key)
    }
}

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

/// A running charon in a namespace. Dropping it stops charon (SIGTERM, then SIGKILL), prints
/// its log's tail if the thread is panicking, and removes its directory.
#[derive(Debug)]
pub struct Charon<'a> {
    ns: &'a Netns,
    label: String,
    dir: PathBuf,
    swanctl: PathBuf,
    process: Option<Process>,
}

impl<'a> Charon<'a> {
    /// Writes the configuration into a fresh temporary directory, copies the credentials
    /// into its `swanctl/` tree, starts charon inside `ns` and waits (≤ 15 s) until it
    /// answers on its vici socket. `label` (letters, digits, `-`) names its log.
    pub fn start(ns: &'a Netns, label: &str, config: CharonConfig) -> Result<Charon<'a>> {
        ensure!(
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "charon label {label:?}: use letters, digits and '-'"
        );
        let swanctl = find_tool("swanctl")
            .context("`swanctl` not found: apt-get install strongswan-swanctl")?;
        ensure!(
            Path::new(CHARON_BIN).is_file(),
            "{CHARON_BIN} not found: apt-get install charon-systemd libcharon-extra-plugins"
        );
        let dir = std::env::temp_dir().join(format!("gate64-charon-{}-{label}", ns.name()));
        let _ = fs::remove_dir_all(&dir);
        // From here on, Drop removes the directory whatever fails.
        let mut charon = Charon {
            ns,
            label: label.to_owned(),
            dir,
            swanctl,
            process: None,
        };
        charon.write_files(&config)?;
        let conf = charon.dir.join("strongswan.conf");
        let env = format!("STRONGSWAN_CONF={}", conf.display());
        let mut process = ns.spawn(&format!("charon-{label}"), &["env", &env, CHARON_BIN])?;
        let socket = charon.dir.join("charon.vici");
        let up = wait_until(START_TIMEOUT, || {
            process.is_running()
                && socket.exists()
                && charon.swanctl_raw(&["--stats"], SWANCTL_TIMEOUT).is_ok()
        });
        let running = process.ensure_running();
        charon.process = Some(process);
        running.with_context(|| charon.failure("charon exited at start"))?;
        ensure!(
            up,
            "{}",
            charon.failure(&format!(
                "no answer on {} within {START_TIMEOUT:?}",
                socket.display()
            ))
        );
        Ok(charon)
    }

    fn write_files(&self, config: &CharonConfig) -> Result<()> {
        let swanctl_dir = self.dir.join("swanctl");
        // Every directory swanctl --load-all opens, so that it reports no missing ones.
        for sub in SWANCTL_SUBDIRS {
            fs::create_dir_all(swanctl_dir.join(sub))
                .with_context(|| format!("creating {}/{sub}", swanctl_dir.display()))?;
        }
        // swanctl reads one certificate per file: split a chain, leaf first.
        let pem = fs::read_to_string(&config.certs.cert)
            .with_context(|| format!("reading {}", config.certs.cert.display()))?;
        let blocks = pem_certificates(&pem);
        ensure!(
            !blocks.is_empty(),
            "{}: no PEM certificate",
            config.certs.cert.display()
        );
        for (i, block) in blocks.iter().enumerate() {
            let name = if i == 0 {
                "own.pem".to_owned()
            } else {
                format!("chain-{i}.pem")
            };
            fs::write(swanctl_dir.join("x509").join(name), block)?;
        }
        for (i, ca) in config.certs.cas.iter().enumerate() {
            let pem =
                fs::read_to_string(ca).with_context(|| format!("reading {}", ca.display()))?;
            for (j, block) in pem_certificates(&pem).iter().enumerate() {
                fs::write(
                    swanctl_dir.join("x509ca").join(format!("ca-{i}-{j}.pem")),
                    block,
                )?;
            }
        }
        fs::copy(
            &config.certs.key,
            swanctl_dir.join("private").join("own.key"),
        )
        .with_context(|| format!("copying {}", config.certs.key.display()))?;
        fs::write(
            self.dir.join("strongswan.conf"),
            config.strongswan_conf(&self.dir),
        )?;
        fs::write(
            swanctl_dir.join("swanctl.conf"),
            config.swanctl_conf("own.pem"),
        )?;
        Ok(())
    }

    /// The label given to [`Charon::start`].
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The directory holding `strongswan.conf`, `swanctl/`, the vici socket and the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// charon's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("charon.log")
    }

    /// The last `lines` lines of charon's log (and of its stdout/stderr), with a header.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        let mut sources = vec![("charon.log".to_owned(), self.log_path())];
        if let Some(p) = &self.process {
            sources.push(("stdout/stderr".to_owned(), p.log_path().to_owned()));
        }
        for (what, path) in sources {
            let text = fs::read(&path)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            let _ = writeln!(
                out,
                "----- charon {} in {}: {what}, last {} of {} lines -----",
                self.label,
                self.ns.name(),
                tail.len(),
                all.len()
            );
            for line in tail {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }

    /// Fails if charon is no longer running (with its log).
    pub fn ensure_running(&mut self) -> Result<()> {
        let label = self.label.clone();
        match self.process.as_mut() {
            Some(p) => p
                .ensure_running()
                .with_context(|| format!("charon {label} died")),
            None => bail!("charon {label} not started"),
        }
    }

    /// `swanctl --load-all --noprompt`: credentials, pools and connections.
    pub fn load_all(&self) -> Result<String> {
        let out = self.swanctl(&["--load-all", "--noprompt"], SWANCTL_TIMEOUT)?;
        ensure!(
            out.contains("successfully loaded") && !out.contains("failed"),
            "{}",
            self.failure(&format!("swanctl --load-all:\n{out}"))
        );
        Ok(out)
    }

    /// `swanctl --initiate --ike <ike> --child <child>`, waiting up to `timeout` for the
    /// exchange to complete; fails (with charon's log) unless it did.
    pub fn initiate(&self, ike: &str, child: &str, timeout: Duration) -> Result<String> {
        let secs = timeout.as_secs().max(1).to_string();
        let out = self.swanctl(
            &[
                "--initiate",
                "--ike",
                ike,
                "--child",
                child,
                "--timeout",
                &secs,
            ],
            timeout + Duration::from_secs(10),
        )?;
        ensure!(
            out.contains("initiate completed successfully"),
            "{}",
            self.failure(&format!("initiating {ike}/{child}:\n{out}"))
        );
        Ok(out)
    }

    /// `swanctl --terminate --ike <ike>`, waiting up to `timeout` for the delete exchange.
    pub fn terminate(&self, ike: &str, timeout: Duration) -> Result<String> {
        let secs = timeout.as_secs().max(1).to_string();
        let out = self.swanctl(
            &["--terminate", "--ike", ike, "--timeout", &secs],
            timeout + Duration::from_secs(10),
        )?;
        ensure!(
            out.contains("terminate completed successfully"),
            "{}",
            self.failure(&format!("terminating {ike}:\n{out}"))
        );
        Ok(out)
    }

    /// `swanctl --rekey --child <child>`: starts a CREATE_CHILD_SA rekey of every child SA of
    /// that name (returns once charon has queued it; watch [`Charon::list_sas`] for the new
    /// SPIs).
    pub fn rekey_child(&self, child: &str) -> Result<String> {
        self.swanctl(&["--rekey", "--child", child], SWANCTL_TIMEOUT)
    }

    /// `swanctl --rekey --ike <ike>`: starts a CREATE_CHILD_SA rekey of the IKE SA(s) of that
    /// name (returns once charon has queued it).
    pub fn rekey_ike(&self, ike: &str) -> Result<String> {
        self.swanctl(&["--rekey", "--ike", ike], SWANCTL_TIMEOUT)
    }

    /// `swanctl --list-sas`, parsed.
    pub fn list_sas(&self) -> Result<Vec<IkeSa>> {
        let out = self.swanctl(&["--list-sas", "--pretty"], SWANCTL_TIMEOUT)?;
        parse_list_sas(&out).with_context(|| format!("parsing swanctl --list-sas:\n{out}"))
    }

    /// Polls [`Charon::list_sas`] until exactly `ike_sas` IKE SAs are established and
    /// exactly `child_sas` child SAs installed; fails after `timeout` with what it saw.
    pub fn wait_established(
        &self,
        ike_sas: usize,
        child_sas: usize,
        timeout: Duration,
    ) -> Result<Vec<IkeSa>> {
        let mut last = Err(anyhow::anyhow!("never listed"));
        let found = wait_for(timeout, || {
            last = self.list_sas();
            let sas = last.as_ref().ok()?;
            let ike = sas.iter().filter(|s| s.is_established()).count();
            let child = sas
                .iter()
                .flat_map(|s| &s.children)
                .filter(|c| c.is_installed())
                .count();
            (ike == ike_sas && child == child_sas).then(|| sas.clone())
        });
        match found {
            Some(sas) => Ok(sas),
            None => bail!(
                "{}",
                self.failure(&format!(
                    "expected {ike_sas} established IKE SAs and {child_sas} installed child \
                     SAs within {timeout:?}; last list: {last:#?}"
                ))
            ),
        }
    }

    /// Runs `swanctl <args>` against this charon (inside its namespace) and returns stdout and
    /// stderr; a non-zero exit is an error quoting both.
    pub fn swanctl(&self, args: &[&str], timeout: Duration) -> Result<String> {
        self.swanctl_raw(args, timeout)
            .with_context(|| format!("charon {}: swanctl {}", self.label, args.join(" ")))
    }

    fn swanctl_raw(&self, args: &[&str], timeout: Duration) -> Result<String> {
        let conf = format!(
            "STRONGSWAN_CONF={}",
            self.dir.join("strongswan.conf").display()
        );
        let dir = format!("SWANCTL_DIR={}", self.dir.join("swanctl").display());
        let mut argv = vec!["env", &conf, &dir, os(&self.swanctl)];
        argv.extend_from_slice(args);
        let out = self.ns.exec_timeout(&argv, timeout)?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(out.status.success(), "exit {}: {text}", out.status);
        Ok(text)
    }

    /// `what` followed by the tail of charon's log, for error messages.
    fn failure(&self, what: &str) -> String {
        format!(
            "charon {}: {what}\n{}",
            self.label,
            self.log_tail(LOG_TAIL_LINES)
        )
    }
}

impl Drop for Charon<'_> {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop();
        }
        if thread::panicking() {
            eprintln!("{}", self.log_tail(LOG_TAIL_LINES));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `result`, or its error followed by the tail of every charon's log: wrap a scenario that
/// uses charons so that any failure (a ping, an assertion) shows what IKE did.
pub fn with_charon_logs<T>(result: Result<T>, charons: &[&Charon<'_>]) -> Result<T> {
    result.map_err(|e| {
        let logs: String = charons.iter().map(|c| c.log_tail(LOG_TAIL_LINES)).collect();
        anyhow::anyhow!("{e:#}\n{logs}")
    })
}

/// The PEM `CERTIFICATE` blocks of `pem`, each with its BEGIN/END lines.
fn pem_certificates(pem: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in pem.lines() {
        let line = line.trim_end();
        if line == "-----BEGIN CERTIFICATE-----" {
            current = Some(String::new());
        }
        if let Some(block) = current.as_mut() {
            block.push_str(line);
            block.push('\n');
        }
        if line == "-----END CERTIFICATE-----" {
            out.extend(current.take());
        }
    }
    out
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
fn parse_list_sas(text: &str) -> Result<Vec<IkeSa>> {
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

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
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

    #[test]
    fn splits_pem_chains() {
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n\
                   -----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n";
        let blocks = pem_certificates(pem);
        assert_eq!(blocks.len(), 2);
        assert!(blocks[1].contains("BBB") && !blocks[1].contains("AAA"));
    }
}
