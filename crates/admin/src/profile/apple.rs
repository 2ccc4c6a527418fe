//! The `.mobileconfig` for macOS and iOS: a `com.apple.vpn.managed` payload of VPNType
//! `IKEv2` with certificate authentication and gate64's proposals, the CA as a
//! `com.apple.security.root` payload, and with `--pkcs12` the client identity as a
//! `com.apple.security.pkcs12` payload. Without it the identity comes from the MDM, which
//! sets PayloadCertificateUUID.

use super::suites::{APPLE, Encr, Hash, choose_esp, choose_ike};
use super::text;
use super::{Inputs, Profile};
use gate64_config::EspProposal;

/// A property-list value.
enum V {
    S(String),
    I(u64),
    B(bool),
    D(Vec<u8>),
    A(Vec<V>),
    Dict(Vec<(&'static str, V)>),
}

fn s(x: &str) -> V {
    V::S(x.to_string())
}

fn write(v: &V, depth: usize, out: &mut String) {
    let pad = "\t".repeat(depth);
    match v {
        V::S(x) => out.push_str(&format!("{pad}<string>{}</string>\n", text::xml(x))),
        V::I(x) => out.push_str(&format!("{pad}<integer>{x}</integer>\n")),
        V::B(x) => out.push_str(&format!("{pad}<{x}/>\n")),
        V::D(x) => out.push_str(&format!("{pad}<data>{}</data>\n", text::base64(x))),
        V::A(items) => {
            out.push_str(&format!("{pad}<array>\n"));
            for i in items {
                write(i, depth + 1, out);
            }
            out.push_str(&format!("{pad}</array>\n"));
        }
        V::Dict(entries) => {
            out.push_str(&format!("{pad}<dict>\n"));
            for (k, v) in entries {
                out.push_str(&format!("{pad}\t<key>{k}</key>\n"));
                write(v, depth + 1, out);
            }
            out.push_str(&format!("{pad}</dict>\n"));
        }
    }
}

fn hash_name(h: Hash) -> &'static str {
    match h {
        Hash::Sha256 => "SHA2-256",
        Hash::Sha384 => "SHA2-384",
        Hash::Sha512 => "SHA2-512",
        Hash::Sha1 => "SHA1-96",
    }
}

fn encr_name(e: Encr) -> &'static str {
    match e {
        Encr::Gcm256 => "AES-256-GCM",
        Encr::Gcm128 => "AES-128-GCM",
        Encr::Cbc256 => "AES-256",
        Encr::Cbc128 => "AES-128",
    }
}

/// Apple's lifetimes run from 10 minutes to a day.
fn minutes(secs: u64) -> u64 {
    (secs / 60).clamp(10, 1440)
}

/// The `.mobileconfig` for `inputs`.
pub fn profile(inputs: &Inputs) -> Result<Profile, String> {
    let ipsec = &inputs.config.ipsec;
    let ike = choose_ike(ipsec, &APPLE)?;
    let esp = choose_esp(ipsec, &APPLE)?;
    let ike_minutes = if ipsec.reauth_secs == 0 {
        1440
    } else {
        minutes(ipsec.reauth_secs)
    };
    let (child_encr, child_integ) = match esp {
        EspProposal::Aes256Gcm16 => ("AES-256-GCM", "SHA2-256"),
        EspProposal::Aes128Gcm16 => ("AES-128-GCM", "SHA2-256"),
        EspProposal::Aes256Sha256 => ("AES-256", "SHA2-256"),
        EspProposal::Aes128Sha256 => ("AES-128", "SHA2-256"),
    };
    // Apple uses one hash for integrity and PRF: with AES-GCM, IntegrityAlgorithm is the PRF.
    let ike_params = V::Dict(vec![
        ("EncryptionAlgorithm", s(encr_name(ike.encr))),
        ("IntegrityAlgorithm", s(hash_name(ike.prf))),
        ("DiffieHellmanGroup", V::I(u64::from(ike.group.id()))),
        ("LifeTimeInMinutes", V::I(ike_minutes)),
    ]);
    let child_params = V::Dict(vec![
        ("EncryptionAlgorithm", s(child_encr)),
        ("IntegrityAlgorithm", s(child_integ)),
        ("DiffieHellmanGroup", V::I(u64::from(ike.group.id()))),
        (
            "LifeTimeInMinutes",
            V::I(minutes(ipsec.child_lifetime_secs)),
        ),
    ]);
    let base = format!("net.gate64.{}", inputs.server);
    let ca_uuid = text::uuid();
    let p12_uuid = text::uuid();
    let mut ikev2 = vec![
        ("RemoteAddress", s(&inputs.server)),
        ("RemoteIdentifier", s(&inputs.remote_id)),
    ];
    if let Some(local) = &inputs.local_id {
        ikev2.push(("LocalIdentifier", s(local)));
    }
    ikev2.extend([
        ("AuthenticationMethod", s("Certificate")),
        ("ExtendedAuthEnabled", V::I(0)),
        ("ServerCertificateIssuerCommonName", s(&inputs.ca_cn)),
        ("EnablePFS", V::I(0)),
        ("DeadPeerDetectionRate", s("Medium")),
        ("DisableMOBIKE", V::I(0)),
        ("DisableRedirect", V::I(1)),
        ("EnableCertificateRevocationCheck", V::I(0)),
        ("UseConfigurationAttributeInternalIPSubnet", V::I(0)),
        ("IKESecurityAssociationParameters", ike_params),
        ("ChildSecurityAssociationParameters", child_params),
    ]);
    if inputs.pkcs12.is_some() {
        ikev2.push(("PayloadCertificateUUID", s(&p12_uuid)));
    }
    let vpn = V::Dict(vec![
        ("PayloadType", s("com.apple.vpn.managed")),
        ("PayloadVersion", V::I(1)),
        ("PayloadIdentifier", s(&format!("{base}.vpn"))),
        ("PayloadUUID", s(&text::uuid())),
        ("PayloadDisplayName", s(&inputs.name)),
        ("UserDefinedName", s(&inputs.name)),
        ("VPNType", s("IKEv2")),
        ("IKEv2", V::Dict(ikev2)),
        ("IPv4", V::Dict(vec![("OverridePrimary", V::I(0))])),
    ]);
    let ca = V::Dict(vec![
        ("PayloadType", s("com.apple.security.root")),
        ("PayloadVersion", V::I(1)),
        ("PayloadIdentifier", s(&format!("{base}.ca"))),
        ("PayloadUUID", s(&ca_uuid)),
        ("PayloadDisplayName", s(&inputs.ca_cn)),
        ("PayloadCertificateFileName", s("gate64-ca.cer")),
        ("PayloadContent", V::D(inputs.ca_der.clone())),
    ]);
    let mut content = vec![vpn, ca];
    if let Some(p12) = &inputs.pkcs12 {
        content.push(V::Dict(vec![
            ("PayloadType", s("com.apple.security.pkcs12")),
            ("PayloadVersion", V::I(1)),
            ("PayloadIdentifier", s(&format!("{base}.identity"))),
            ("PayloadUUID", s(&p12_uuid)),
            ("PayloadDisplayName", s("gate64 client identity")),
            ("PayloadCertificateFileName", s("client.p12")),
            ("PayloadContent", V::D(p12.clone())),
        ]));
    }
    let top = V::Dict(vec![
        ("PayloadType", s("Configuration")),
        ("PayloadVersion", V::I(1)),
        ("PayloadIdentifier", s(&base)),
        ("PayloadUUID", s(&text::uuid())),
        ("PayloadDisplayName", s(&inputs.name)),
        ("PayloadRemovalDisallowed", V::B(false)),
        ("PayloadContent", V::A(content)),
    ]);
    let mut body = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \
         \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <plist version=\"1.0\">\n",
    );
    write(&top, 0, &mut body);
    body.push_str("</plist>\n");
    let ike_str = format!(
        "{} {} group {}",
        encr_name(ike.encr),
        hash_name(ike.prf),
        ike.group.id()
    );
    let notes = if inputs.pkcs12.is_some() {
        format!(
            "macOS/iOS: install the profile (it holds the client identity; the device asks for \
             the PKCS#12 password). IKE {ike_str}, child SA {child_encr}.\n"
        )
    } else {
        format!(
            "macOS/iOS: the profile holds no client identity: deploy it through the MDM, which \
             adds the device certificate and sets IKEv2 PayloadCertificateUUID, or pass \
             --pkcs12. IKE {ike_str}, child SA {child_encr}.\n"
        )
    };
    Ok(Profile { body, notes })
}
