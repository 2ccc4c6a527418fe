//! Windows: a PowerShell script that creates an Always On VPN device tunnel (machine
//! certificate, IKEv2, split tunnel) through the MDM bridge's VPNv2 CSP (`MDM_VPNv2_01`),
//! from a ProfileXML whose `CryptographySuite` is gate64's strongest accepted set Windows
//! offers, and imports the CA into the machine's trusted roots.

use super::suites::{Encr, Group, Hash, WINDOWS, choose_esp, choose_ike};
use super::text;
use super::{Inputs, Profile};
use gate64_config::EspProposal;

fn encryption_method(e: Encr) -> &'static str {
    match e {
        Encr::Gcm256 => "AES_GCM_256",
        Encr::Gcm128 => "AES_GCM_128",
        Encr::Cbc256 => "AES256",
        Encr::Cbc128 => "AES128",
    }
}

/// IntegrityCheckMethod: Windows' IKE integrity and, with AES-GCM, its PRF.
fn integrity_check_method(h: Hash) -> &'static str {
    match h {
        Hash::Sha256 => "SHA256",
        Hash::Sha384 => "SHA384",
        // Not in WINDOWS.hashes; SHA1 is the closest value the CSP has.
        Hash::Sha512 | Hash::Sha1 => "SHA196",
    }
}

/// DHGroup; groups outside WINDOWS.groups are never chosen.
fn dh_group(g: Group) -> &'static str {
    match g {
        Group::Ecp256 => "ECP256",
        Group::Ecp384 => "ECP384",
        Group::Modp1024 => "Group2",
        Group::Modp2048 | Group::Modp3072 | Group::Modp4096 | Group::Curve25519 => "Group14",
    }
}

/// (CipherTransformConstants, AuthenticationTransformConstants): the ESP cipher and
/// integrity; an AES-GCM cipher names itself as the integrity too.
fn esp_constants(s: EspProposal) -> (&'static str, &'static str) {
    match s {
        EspProposal::Aes256Gcm16 => ("GCMAES256", "GCMAES256"),
        EspProposal::Aes128Gcm16 => ("GCMAES128", "GCMAES128"),
        EspProposal::Aes256Sha256 => ("AES256", "SHA256128"),
        EspProposal::Aes128Sha256 => ("AES128", "SHA256128"),
    }
}

/// The VPNv2 ProfileXML of the device tunnel.
pub fn profile_xml(inputs: &Inputs) -> Result<String, String> {
    let cfg = &inputs.config;
    let ike = choose_ike(&cfg.ipsec, &WINDOWS)?;
    let esp = choose_esp(&cfg.ipsec, &WINDOWS)?;
    let (cipher, auth) = esp_constants(esp);
    // With `ipsec.pool4` the device tunnel also carries IPv4: its IPv4 networks are routes
    // too, and its IPv4 DNS servers are asked as well.
    let ipv4 = cfg.ipsec.pool4.is_some();
    let routes: Vec<(std::net::IpAddr, u8)> = cfg
        .ipsec_infrastructure_prefixes()
        .into_iter()
        .map(|p| (p.network().into(), p.prefix_len()))
        .chain(
            cfg.ipsec_infrastructure_prefixes4()
                .into_iter()
                .filter(|_| ipv4)
                .map(|p| (p.network().into(), p.prefix_len())),
        )
        .collect();
    if routes.is_empty() {
        return Err(
            "ipsec.infrastructure_prefixes is empty: a Windows device tunnel is split tunnel \
             only and needs at least one route"
                .into(),
        );
    }
    let mut x = String::from("<VPNProfile>\n");
    x.push_str("  <AlwaysOn>true</AlwaysOn>\n  <DeviceTunnel>true</DeviceTunnel>\n");
    x.push_str("  <RegisterDNS>true</RegisterDNS>\n");
    x.push_str("  <NativeProfile>\n");
    x.push_str(&format!(
        "    <Servers>{}</Servers>\n",
        text::xml(&inputs.server)
    ));
    x.push_str("    <NativeProtocolType>IKEv2</NativeProtocolType>\n");
    x.push_str(
        "    <Authentication>\n      <MachineMethod>Certificate</MachineMethod>\n    \
         </Authentication>\n",
    );
    x.push_str("    <RoutingPolicyType>SplitTunnel</RoutingPolicyType>\n");
    x.push_str("    <DisableClassBasedDefaultRoute>true</DisableClassBasedDefaultRoute>\n");
    x.push_str("    <CryptographySuite>\n");
    for (name, value) in [
        ("AuthenticationTransformConstants", auth),
        ("CipherTransformConstants", cipher),
        ("EncryptionMethod", encryption_method(ike.encr)),
        ("IntegrityCheckMethod", integrity_check_method(ike.prf)),
        ("DHGroup", dh_group(ike.group)),
        ("PfsGroup", "None"),
    ] {
        x.push_str(&format!("      <{name}>{value}</{name}>\n"));
    }
    x.push_str("    </CryptographySuite>\n  </NativeProfile>\n");
    for (network, len) in routes {
        x.push_str(&format!(
            "  <Route>\n    <Address>{network}</Address>\n    <PrefixSize>{len}</PrefixSize>\n  </Route>\n"
        ));
    }
    let dns: Vec<std::net::IpAddr> = cfg
        .ipsec_dns()
        .into_iter()
        .map(std::net::IpAddr::V6)
        .chain(
            cfg.ipsec_dns4()
                .into_iter()
                .filter(|_| ipv4)
                .map(std::net::IpAddr::V4),
        )
        .collect();
    if !dns.is_empty() {
        let servers = dns
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",");
        for d in &cfg.ipsec.dns_domains {
            let d = d.trim_start_matches('.');
            if !text::plain(d) {
                continue;
            }
            x.push_str(&format!(
                "  <DomainNameInformation>\n    <DomainName>.{d}</DomainName>\n    \
                 <DnsServers>{servers}</DnsServers>\n  </DomainNameInformation>\n"
            ));
        }
    }
    x.push_str("</VPNProfile>\n");
    Ok(x)
}

/// The PowerShell script for `inputs`.
pub fn profile(inputs: &Inputs) -> Result<Profile, String> {
    let xml = profile_xml(inputs)?;
    let ike = choose_ike(&inputs.config.ipsec, &WINDOWS)?;
    let body = format!(
        "# gate64 Always On VPN device tunnel '{name}' to {server} (IKEv2, machine certificate).\n\
         # Windows 10/11 Enterprise or Education, joined to the domain or MDM-managed, with a\n\
         # machine certificate (clientAuth) in Cert:\\LocalMachine\\My issued by a CA gate64's\n\
         # ipsec.ca trusts. Run as SYSTEM, e.g. `PsExec.exe -s -i powershell.exe -File <this file>`.\n\
         # gate64 proves the identity {remote}; Windows checks that {server} is in its certificate.\n\
         # The same cryptography by hand: Set-VpnConnectionIPsecConfiguration with the\n\
         # CryptographySuite values below (EncryptionMethod AES_GCM_256 is GCMAES256 there).\n\
         #Requires -RunAsAdministrator\n\
         $ErrorActionPreference = 'Stop'\n\
         $ProfileName = '{name}'\n\
         \n\
         # The CA that issued gate64's IKE certificate ({cn}), into the machine's trusted roots.\n\
         $CaFile = Join-Path $env:TEMP 'gate64-ca.cer'\n\
         [IO.File]::WriteAllBytes($CaFile, [Convert]::FromBase64String('{ca}'))\n\
         Import-Certificate -FilePath $CaFile -CertStoreLocation Cert:\\LocalMachine\\Root | Out-Null\n\
         Remove-Item $CaFile\n\
         \n\
         $ProfileXML = @'\n\
         {xml}'@\n\
         \n\
         # The VPNv2 CSP through the MDM bridge; an older profile of the same name is replaced.\n\
         $Namespace = 'root\\cimv2\\mdm\\dmmap'\n\
         $Class = 'MDM_VPNv2_01'\n\
         $InstanceId = [Uri]::EscapeDataString($ProfileName)\n\
         $Session = New-CimSession\n\
         Get-CimInstance -CimSession $Session -Namespace $Namespace -ClassName $Class |\n\
         \x20   Where-Object {{ $_.InstanceID -eq $InstanceId }} |\n\
         \x20   Remove-CimInstance -CimSession $Session\n\
         $Instance = New-Object Microsoft.Management.Infrastructure.CimInstance $Class, $Namespace\n\
         foreach ($p in @(\n\
         \x20   @('ParentID', './Vendor/MSFT/VPNv2', 'Key'),\n\
         \x20   @('InstanceID', $InstanceId, 'Key'),\n\
         \x20   @('ProfileXML', [Security.SecurityElement]::Escape($ProfileXML), 'Property'))) {{\n\
         \x20   $Instance.CimInstanceProperties.Add(\n\
         \x20       [Microsoft.Management.Infrastructure.CimProperty]::Create($p[0], $p[1], 'String', $p[2]))\n\
         }}\n\
         $Session.CreateInstance($Namespace, $Instance) | Out-Null\n\
         Write-Output \"Created the device tunnel $ProfileName to {server}\"\n",
        name = inputs.name,
        server = inputs.server,
        remote = inputs.remote_id,
        cn = inputs.ca_cn,
        ca = text::base64(&inputs.ca_der),
    );
    let notes = format!(
        "Windows: run the script as SYSTEM on the client. CryptographySuite: IKE {} (group {}), \
         ESP {}; Windows then proposes nothing else, so no legacy_proposals is needed.\n",
        ike.swan(),
        ike.group.id(),
        choose_esp(&inputs.config.ipsec, &WINDOWS).map(super::suites::esp_swan)?
    );
    Ok(Profile { body, notes })
}
