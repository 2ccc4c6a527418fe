//! Android: a `.sswan` profile for the strongSwan app (JSON, as strongSwan's "Android VPN
//! client profiles" documents it), and the settings of Android's built-in IKEv2 client,
//! whose proposals are fixed, as text.

use super::suites::{ANDROID_BUILTIN, STRONGSWAN, choose_esp, choose_ike, esp_swan};
use super::text;
use super::{Inputs, Profile};
use serde_json::{Map, Value, json};

/// The `.sswan` for `inputs`, with the built-in client's settings as notes.
pub fn profile(inputs: &Inputs) -> Result<Profile, String> {
    let ipsec = &inputs.config.ipsec;
    let ike = choose_ike(ipsec, &STRONGSWAN)?;
    let esp = choose_esp(ipsec, &STRONGSWAN)?;
    let mut local = Map::new();
    if let Some(id) = &inputs.local_id {
        local.insert("id".into(), Value::from(id.as_str()));
    }
    if let Some(p12) = &inputs.pkcs12 {
        local.insert("p12".into(), Value::from(text::base64(p12)));
    }
    let mut profile = json!({
        "uuid": text::uuid().to_ascii_lowercase(),
        "name": inputs.name,
        "type": "ikev2-cert",
        "remote": {
            "addr": inputs.server,
            "id": inputs.remote_id,
            "cert": text::base64(&inputs.ca_der),
        },
        "ike-proposal": ike.swan(),
        "esp-proposal": esp_swan(esp),
    });
    if !local.is_empty()
        && let Some(obj) = profile.as_object_mut()
    {
        obj.insert("local".into(), Value::Object(local));
    }
    let mut body = serde_json::to_string_pretty(&profile).map_err(|e| e.to_string())?;
    body.push('\n');
    let mut notes = format!(
        "strongSwan app: open the .sswan on the device (or Import VPN profile); {}. \
         IKE {}, ESP {}.\n",
        if inputs.pkcs12.is_some() {
            "it holds the client certificate and key"
        } else {
            "install the client certificate (PKCS#12) into Android's keystore and pick it in the \
             profile"
        },
        ike.swan(),
        esp_swan(esp)
    );
    notes.push_str(&builtin(inputs));
    Ok(Profile { body, notes })
}

/// The settings of Android's built-in client (Settings > Network > VPN > Add, Android 11 and
/// later), or why it cannot connect to this configuration.
fn builtin(inputs: &Inputs) -> String {
    let ipsec = &inputs.config.ipsec;
    if let Err(why) = choose_ike(ipsec, &ANDROID_BUILTIN) {
        return format!("Android's built-in client cannot connect: {why}\n");
    }
    format!(
        "Android's built-in client (Android 11 or later; its proposals are fixed):\n\
         \x20 Type: IKEv2/IPSec RSA\n\
         \x20 Server address: {server}\n\
         \x20 IPSec identifier: {local}\n\
         \x20 IPSec user certificate: the client certificate installed from its PKCS#12\n\
         \x20 IPSec CA certificate: the CA ({cn}), installed as a VPN and app user certificate\n\
         \x20 IPSec server certificate: (received from server)\n\
         \x20 The client asks for the server address as gate64's identity: gate64's \
         certificate must hold {server} (gate64 proves {remote} otherwise)\n",
        server = inputs.server,
        local = inputs
            .local_id
            .as_deref()
            .unwrap_or("the client certificate's subjectAltName"),
        cn = inputs.ca_cn,
        remote = inputs.remote_id,
    )
}
