//! `gate64 profile`: client profiles whose proposals, identities and CA match gate64's
//! configuration, ready to import: an Always On VPN device tunnel for Windows (a PowerShell
//! script around a VPNv2 ProfileXML), a `.mobileconfig` for macOS and iOS, a `.sswan` for
//! the strongSwan Android app (with the settings of Android's built-in client), and a
//! `.nmconnection` for NetworkManager-strongswan. docs/clients/ has a page per OS.
//!
//! The proposals are the strongest combination gate64's `[ipsec]` accepts that the OS can
//! propose ([`suites`]); a configuration that leaves an OS nothing is refused, naming the key.
//! The server identity is `ipsec.identity`, else the first subjectAltName of
//! `ipsec.certificate` (when the file is readable here), else `--server`.

mod android;
mod apple;
mod networkmanager;
pub mod suites;
mod text;
mod windows;

#[cfg(test)]
mod tests;

use anyhow::{Context, Result, bail, ensure};
use gate64_config::Config;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use x509_parser::prelude::*;

/// The client a profile is for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A PowerShell script creating an Always On VPN device tunnel (machine certificate).
    Windows,
    /// A `.mobileconfig` for macOS and iOS (IKEv2, certificate authentication).
    Apple,
    /// A `.sswan` profile for the strongSwan Android app, and the settings of Android's
    /// built-in IKEv2 client.
    Android,
    /// A `.nmconnection` keyfile for NetworkManager-strongswan.
    Networkmanager,
}

/// Arguments of `gate64 profile`.
#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// Which client the profile is for.
    #[arg(value_enum)]
    pub kind: Kind,
    /// gate64's configuration file: the proposals, the server identity and the routes come
    /// from its `[ipsec]` section.
    #[arg(long, short, value_name = "FILE")]
    pub config: PathBuf,
    /// What clients dial: a DNS name in gate64's IKE certificate, or one of `ipsec.listen`.
    #[arg(long, value_name = "NAME_OR_ADDRESS")]
    pub server: String,
    /// PEM file of the CA that issued gate64's IKE certificate: clients trust it for gate64.
    #[arg(long, value_name = "CA.pem")]
    pub ca: PathBuf,
    /// Where to write the profile (mode 0600); default: standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The connection's name as the client shows it.
    #[arg(long, default_value = "gate64")]
    pub name: String,
    /// gate64's identity the client checks; default `ipsec.identity`, else the first
    /// subjectAltName of `ipsec.certificate`, else `--server`.
    #[arg(long, value_name = "ID")]
    pub remote_id: Option<String>,
    /// The client's identity (a name in its certificate); apple, android and
    /// networkmanager. Default: the client picks (its certificate's subject).
    #[arg(long, value_name = "ID")]
    pub local_id: Option<String>,
    /// apple, android: a PKCS#12 file with the client's certificate and key to embed.
    /// Default: none, the identity comes from the MDM (apple) or the app's keystore (android).
    #[arg(long, value_name = "FILE")]
    pub pkcs12: Option<PathBuf>,
    /// networkmanager: path of the client's certificate on the client (written, not read).
    #[arg(long, value_name = "PATH")]
    pub client_cert: Option<PathBuf>,
    /// networkmanager: path of the client's private key on the client (written, not read).
    #[arg(long, value_name = "PATH")]
    pub client_key: Option<PathBuf>,
    /// networkmanager: path the CA will have on the client; default: `--ca` made absolute.
    #[arg(long, value_name = "PATH")]
    pub ca_path: Option<PathBuf>,
}

/// What every profile is built from.
pub(crate) struct Inputs {
    pub config: Config,
    pub server: String,
    pub remote_id: String,
    pub local_id: Option<String>,
    pub name: String,
    /// The CA in DER.
    pub ca_der: Vec<u8>,
    /// The CA's subject common name (Apple's ServerCertificateIssuerCommonName).
    pub ca_cn: String,
    pub pkcs12: Option<Vec<u8>>,
}

/// A generated profile and what to tell the person who asked for it.
pub(crate) struct Profile {
    pub body: String,
    pub notes: String,
}

/// Runs `gate64 profile`.
pub fn run(args: &ProfileArgs) -> Result<()> {
    let inputs = inputs(args)?;
    let mut profile = generate(args, &inputs)?;
    profile.notes.push_str(&warnings(&inputs));
    match &args.out {
        Some(path) => {
            write_private(path, profile.body.as_bytes())?;
            println!("wrote {}", path.display());
            print!("{}", profile.notes);
        }
        None => {
            print!("{}", profile.body);
            eprint!("{}", profile.notes);
        }
    }
    Ok(())
}

fn generate(args: &ProfileArgs, inputs: &Inputs) -> Result<Profile> {
    match args.kind {
        Kind::Windows => windows::profile(inputs),
        Kind::Apple => apple::profile(inputs),
        Kind::Android => android::profile(inputs),
        Kind::Networkmanager => {
            let (Some(cert), Some(key)) = (&args.client_cert, &args.client_key) else {
                bail!(
                    "networkmanager needs --client-cert and --client-key: the paths of the \
                     client's certificate and key on the client"
                );
            };
            let ca = match &args.ca_path {
                Some(p) => p.clone(),
                None => std::path::absolute(&args.ca)
                    .with_context(|| format!("--ca {}", args.ca.display()))?,
            };
            networkmanager::profile(inputs, &ca, cert, key)
        }
    }
    .map_err(anyhow::Error::msg)
}

/// What may keep clients from reaching gate64 with this profile: no `ipsec.listen`, or a
/// `--server` address that is not one of them (fine behind a one-to-one NAT).
fn warnings(inputs: &Inputs) -> String {
    let listen = &inputs.config.ipsec.listen;
    if listen.is_empty() {
        return "warning: ipsec.listen is empty: gate64 binds no address for IKEv2 clients \
                that dial it directly\n"
            .into();
    }
    match inputs.server.parse::<std::net::IpAddr>() {
        Ok(ip) if !listen.contains(&ip) => format!(
            "warning: --server {ip} is none of ipsec.listen ({}): it must reach one of them \
             (e.g. through a one-to-one NAT)\n",
            listen
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => String::new(),
    }
}

/// Reads the configuration and the CA, and settles the identities.
fn inputs(args: &ProfileArgs) -> Result<Inputs> {
    let config = Config::load(&args.config)?;
    ensure!(
        text::plain(&args.server),
        "--server {:?}: a DNS name or an IP address (letters, digits, '.', '-', ':')",
        args.server
    );
    ensure!(
        !args.name.is_empty()
            && args.name.len() <= 64
            && args
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || " -_.".contains(c)),
        "--name {:?}: 1 to 64 letters, digits, spaces, '-', '_' or '.'",
        args.name
    );
    for (flag, id) in [
        ("--remote-id", &args.remote_id),
        ("--local-id", &args.local_id),
    ] {
        if let Some(id) = id {
            ensure!(
                text::identity(id),
                "{flag} {id:?}: a DNS name, an IP address, an email address or a DN of at most \
                 253 printable characters without quotes, '<', '>' or '&'"
            );
        }
    }
    let pem = std::fs::read(&args.ca).with_context(|| format!("--ca {}", args.ca.display()))?;
    let (ca_der, ca_cn) =
        first_certificate(&pem).with_context(|| format!("--ca {}", args.ca.display()))?;
    let remote_id = match &args.remote_id {
        Some(id) => id.clone(),
        None => server_identity(&config).unwrap_or_else(|| args.server.clone()),
    };
    ensure!(
        text::identity(&remote_id),
        "gate64's identity {remote_id:?} cannot go into a profile: pass --remote-id"
    );
    let pkcs12 = match &args.pkcs12 {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("--pkcs12 {}", p.display()))?),
        None => None,
    };
    Ok(Inputs {
        config,
        server: args.server.clone(),
        remote_id,
        local_id: args.local_id.clone(),
        name: args.name.clone(),
        ca_der,
        ca_cn,
        pkcs12,
    })
}

/// The first certificate of a PEM file, in DER, and its subject's common name.
fn first_certificate(pem: &[u8]) -> Result<(Vec<u8>, String)> {
    for block in Pem::iter_from_buffer(pem) {
        let block = block.context("not a PEM file")?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let cert = block
            .parse_x509()
            .context("a certificate that does not parse")?;
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default()
            .to_string();
        ensure!(
            text::identity(&cn),
            "the CA's subject has no common name a profile can hold"
        );
        return Ok((block.contents.clone(), cn));
    }
    bail!("holds no CERTIFICATE block")
}

/// `ipsec.identity`, else the first subjectAltName of `ipsec.certificate` (a DNS name, an
/// IP address or an email address), as gate64 proves it; `None` when neither is at hand.
fn server_identity(config: &Config) -> Option<String> {
    if let Some(id) = &config.ipsec.identity {
        return Some(id.clone());
    }
    let pem = std::fs::read(config.ipsec.certificate.as_ref()?).ok()?;
    let block = Pem::iter_from_buffer(&pem).next()?.ok()?;
    let cert = block.parse_x509().ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|n| match n {
        GeneralName::DNSName(d) => Some((*d).to_string()),
        GeneralName::RFC822Name(e) => Some((*e).to_string()),
        GeneralName::IPAddress(b) => match b.len() {
            4 => <[u8; 4]>::try_from(*b)
                .ok()
                .map(|a| std::net::Ipv4Addr::from(a).to_string()),
            16 => <[u8; 16]>::try_from(*b)
                .ok()
                .map(|a| std::net::Ipv6Addr::from(a).to_string()),
            _ => None,
        },
        _ => None,
    })
}

/// Writes `data` to `path` with mode 0600 (a profile may embed a PKCS#12 identity, and
/// NetworkManager loads keyfiles only when they are private).
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("--out {}", path.display()))?;
    f.write_all(data)
        .with_context(|| format!("--out {}", path.display()))
}
