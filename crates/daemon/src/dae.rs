//! RADIUS Dynamic Authorization in the daemon (`[accounting.dae]`, RFC 5176): the listener
//! of `gate64-io` verifies Disconnect-Requests and CoA-Requests; here each is matched against
//! the sessions as accounting names them ([`crate::accounting::Sessions::find`]) and carried
//! out by the IKE driver, as `gate64 disconnect` is: a Disconnect-Request ends the matched
//! sessions' IKE SAs (each client hears a Delete; `gate64_ipsec_disconnects_total
//! {reason="radius"}`), a CoA-Request's Session-Timeout sets when they end
//! (`reason="session_timeout"`), its Filter-Id puts the named `[[policy]]` on their child SAs
//! at once (`crate::policy`; an unknown name is a NAK, 404, logged with the name). An
//! answer says ACK only once the change is made.

use crate::accounting::Sessions;
use crate::policy::Policies;
use anyhow::{Context, Result};
use gate64_accounting::Tunnel;
use gate64_accounting::dae::{Client, Dae, ErrorCause, Kind, Request};
use gate64_config::Config;
use gate64_ike::responder::{DisconnectTarget, EndReason};
use gate64_io::ike::IkeControl;
use gate64_io::radius::dae::{DaeListener, Handler};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long a request waits for the IKE driver before it is NAKed (506).
const IKE_TIMEOUT: Duration = Duration::from_secs(2);

/// The clients of `[[accounting.dae.client]]` with their secrets read (`check-config`
/// reads them here too).
pub(crate) fn clients(cfg: &Config) -> Result<Vec<Client>> {
    let Some(dae) = &cfg.accounting.dae else {
        return Ok(Vec::new());
    };
    dae.clients
        .iter()
        .map(|c| {
            Ok(Client {
                address: c.address.addr(),
                prefix_len: c.address.prefix_len(),
                secret: crate::accounting::read_secret(
                    "accounting.dae.client.secret_file",
                    &c.secret_file,
                )?,
            })
        })
        .collect()
}

/// Starts the listener when `[accounting.dae]` is set; `None` when it is not.
pub fn start(
    cfg: &Config,
    sessions: Arc<Sessions>,
    ike: Option<IkeControl>,
    shared: Arc<gate64_dataplane::Shared>,
) -> Result<Option<DaeListener>> {
    let Some(dae) = &cfg.accounting.dae else {
        return Ok(None);
    };
    let core = Dae::new(clients(cfg)?, dae.replay_window_secs);
    let policies = Policies::new(cfg);
    let handler: Handler =
        Box::new(move |req, from| act(req, from, &sessions, ike.as_ref(), &shared, &policies));
    let listener = gate64_io::radius::dae::start(dae.listen, core, handler).with_context(|| {
        format!(
            "binding the RADIUS Dynamic Authorization listener (`accounting.dae.listen` = {})",
            dae.listen
        )
    })?;
    Ok(Some(listener))
}

/// Carries out a verified request; `None`: done (ACK).
fn act(
    req: &Request,
    from: IpAddr,
    sessions: &Sessions,
    ike: Option<&IkeControl>,
    shared: &gate64_dataplane::Shared,
    policies: &Policies,
) -> Option<ErrorCause> {
    if let Some(name) = &req.filter_id
        && !policies.knows(name)
    {
        tracing::warn!(client = %from, filter_id = %name, "radius dae: CoA-Request names a policy no [[policy]] has; refused (NAK 404)");
        return Some(ErrorCause::InvalidRequest);
    }
    let found = sessions.find(&req.criteria);
    if found.is_empty() {
        tracing::info!(client = %from, request = req.kind.label(), criteria = ?req.criteria, "radius dae: no session matches");
        return Some(ErrorCause::SessionContextNotFound);
    }
    let Some(ike) = ike else {
        return Some(ErrorCause::ResourcesUnavailable);
    };
    let mut spis: Vec<u64> = found.iter().flat_map(|f| f.ike_spis.clone()).collect();
    // An Acct-Session-Id names one tunnel: only that tunnel's IKE SAs.
    let tunnels: Vec<(u64, Option<Tunnel>)> = found
        .iter()
        .flat_map(|f| f.ike_spis.iter().map(|spi| (*spi, f.tunnel)))
        .collect();
    // The IKE SAs as the driver has them: to narrow to a tunnel, and for a Filter-Id (the SA
    // database files child SAs under the initiator's SPI).
    let mut ike_sas = None;
    if tunnels.iter().any(|(_, t)| t.is_some()) || req.filter_id.is_some() {
        let Some(sas) = ike.ike_sas(IKE_TIMEOUT) else {
            return Some(ErrorCause::ResourcesUnavailable);
        };
        ike_sas = Some(sas);
    }
    if let Some(sas) = ike_sas
        .as_ref()
        .filter(|_| tunnels.iter().any(|(_, t)| t.is_some()))
    {
        spis.retain(|spi| {
            let wanted = tunnels.iter().find(|(s, _)| s == spi).and_then(|(_, t)| *t);
            let has = sas
                .iter()
                .find(|sa| sa.spi_r == *spi)
                .and_then(|sa| sa.tunnel)
                .map(crate::accounting::tunnel);
            wanted.is_none() || has == wanted
        });
    }
    if spis.is_empty() {
        return Some(ErrorCause::SessionContextNotFound);
    }
    let names: Vec<(&str, &str)> = found
        .iter()
        .map(|f| (f.session.as_str(), f.identity.as_str()))
        .collect();
    match req.kind {
        Kind::Disconnect => {
            let Some(removed) = ike.disconnect_for(
                DisconnectTarget::IkeSpis(spis),
                EndReason::Radius,
                IKE_TIMEOUT,
            ) else {
                return Some(ErrorCause::ResourcesUnavailable);
            };
            if removed.is_empty() {
                return Some(ErrorCause::SessionContextNotFound);
            }
            crate::disconnect::close_iphttps_links(shared, &removed);
            tracing::info!(client = %from, sessions = ?names, ike_sas = removed.len(), "radius dae: Disconnect-Request ended sessions");
            None
        }
        Kind::Coa => {
            if let (Some(name), Some(sas)) = (&req.filter_id, &ike_sas) {
                let Some(sadb) = shared.sadb() else {
                    return Some(ErrorCause::ResourcesUnavailable);
                };
                let mut children = 0;
                let mut applied = 0;
                // Child SAs are filed under the initiator SPI of the IKE SA that installed
                // them: after an IKE rekey, that of the IKE SA it replaced.
                let mut targets: Vec<u64> = Vec::new();
                for sa in sas.iter().filter(|sa| spis.contains(&sa.spi_r)) {
                    targets.push(sa.spi_i);
                    targets.extend(
                        sa.child_spis
                            .iter()
                            .filter_map(|&c| sadb.inbound(c).map(|e| e.ike_spi)),
                    );
                }
                targets.sort_unstable();
                targets.dedup();
                for ike_spi in targets {
                    match policies.apply(sadb, ike_spi, Some(name)) {
                        Ok(n) => {
                            children += n;
                            applied += 1;
                        }
                        Err(e) => {
                            tracing::warn!(client = %from, error = %e, "radius dae: CoA-Request refused");
                            return Some(ErrorCause::InvalidRequest);
                        }
                    }
                }
                if applied == 0 {
                    return Some(ErrorCause::SessionContextNotFound);
                }
                tracing::info!(client = %from, sessions = ?names, ike_spis = applied, child_sas = children, policy = %name, "radius dae: CoA-Request applied a policy");
            }
            // Without a Session-Timeout the Filter-Id was the whole change: done (ACK).
            let secs = req.session_timeout?;
            let set = ike.set_session_end(spis, Duration::from_secs(u64::from(secs)), IKE_TIMEOUT);
            match set {
                None => Some(ErrorCause::ResourcesUnavailable),
                Some(set) if set.is_empty() => Some(ErrorCause::SessionContextNotFound),
                Some(set) => {
                    tracing::info!(client = %from, sessions = ?names, ike_sas = set.len(), session_timeout = secs, "radius dae: CoA-Request set the sessions' end");
                    None
                }
            }
        }
    }
}
