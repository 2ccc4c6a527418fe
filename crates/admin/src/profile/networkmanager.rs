//! The `.nmconnection` keyfile for NetworkManager-strongswan: certificate authentication,
//! a virtual IP requested, and gate64's proposals given explicitly (`proposal=yes`).

use super::suites::{STRONGSWAN, choose_esp, choose_ike, esp_swan};
use super::text;
use super::{Inputs, Profile};
use std::path::Path;

/// The keyfile for `inputs`; `ca`, `cert` and `key` are paths on the client.
pub fn profile(inputs: &Inputs, ca: &Path, cert: &Path, key: &Path) -> Result<Profile, String> {
    let ipsec = &inputs.config.ipsec;
    let ike = choose_ike(ipsec, &STRONGSWAN)?;
    let esp = choose_esp(ipsec, &STRONGSWAN)?;
    for (flag, p) in [
        ("--ca-path", ca),
        ("--client-cert", cert),
        ("--client-key", key),
    ] {
        let ok = p.is_absolute()
            && p.to_str()
                .is_some_and(|s| s.chars().all(|c| c.is_ascii_graphic() && c != '\\'));
        if !ok {
            return Err(format!(
                "{flag} {}: an absolute path of printable characters without spaces",
                p.display()
            ));
        }
    }
    let mut body = format!(
        "[connection]\n\
         id={name}\n\
         uuid={uuid}\n\
         type=vpn\n\
         autoconnect=false\n\
         \n\
         [vpn]\n\
         service-type=org.freedesktop.NetworkManager.strongswan\n\
         address={server}\n\
         certificate={ca}\n\
         method=cert\n\
         usercert={cert}\n\
         userkey={key}\n\
         remote-identity={remote}\n",
        name = inputs.name,
        uuid = text::uuid().to_ascii_lowercase(),
        server = inputs.server,
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
        remote = inputs.remote_id,
    );
    if let Some(local) = &inputs.local_id {
        body.push_str(&format!("local-identity={local}\n"));
    }
    body.push_str(&format!(
        "virtual=yes\n\
         encap=no\n\
         ipcomp=no\n\
         proposal=yes\n\
         ike={ike}\n\
         esp={esp}\n\
         \n\
         [ipv4]\n\
         method=auto\n\
         \n\
         [ipv6]\n\
         addr-gen-mode=default\n\
         method=auto\n",
        ike = ike.swan(),
        esp = esp_swan(esp),
    ));
    let notes = format!(
        "NetworkManager: copy the keyfile to /etc/NetworkManager/system-connections/ (root, mode \
         0600), then `nmcli connection reload` and `nmcli connection up '{}'`. The CA, the client \
         certificate and its key must be at the paths it names. IKE {}, ESP {}.\n",
        inputs.name,
        ike.swan(),
        esp_swan(esp)
    );
    Ok(Profile { body, notes })
}
