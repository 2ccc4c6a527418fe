//! The data of the status page (`/status` on the metrics listener): each component's
//! health, the connected IPsec clients, and throughput and client counts over the last ten
//! minutes. A task rebuilds the JSON and the HTTP handler hands out the latest copy, so what
//! a request costs does not depend on how many clients there are or on how often the page is
//! loaded.
//!
//! A rebuild lists every IKE SA and writes a row per client: at 100,000 clients it takes
//! seconds of a core, and rebuilt every [`REFRESH`] it took a core for itself, starving the IKE
//! loop until its socket dropped the clients' answers. So [`Pace`] rebuilds every [`REFRESH`]
//! only while the page is being read (a request within [`WATCHED`]) and otherwise every
//! [`UNWATCHED_REFRESH`], and never sooner after a rebuild than 20 times (unread: 100 times)
//! what it took: the page costs at most a twentieth of a core however many clients there are.

use gate64_config::Config;
use gate64_dataplane::{Direction, Shared, Side};
use gate64_io::ike::IkeControl;
use gate64_io::metrics_http::StatusJson;
use gate64_metrics::Exporter;
use serde::Serialize;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the page's data is rebuilt (and the page polls).
pub const REFRESH: Duration = Duration::from_secs(2);
/// A request this recent means someone is reading the page.
pub const WATCHED: Duration = Duration::from_secs(60);
/// How often the data is rebuilt while nobody reads it, so a first request finds it recent.
pub const UNWATCHED_REFRESH: Duration = Duration::from_secs(60);
/// Samples kept: ten minutes at [`REFRESH`].
const HISTORY: usize = 300;

/// What `/status.json` holds.
#[derive(Debug, Serialize)]
pub struct StatusDoc {
    /// Each component's health.
    pub components: Vec<Component>,
    /// The clients with at least one child SA.
    pub clients: Vec<ClientRow>,
    /// Throughput and client counts, oldest first.
    pub history: Vec<Sample>,
}

/// One component.
#[derive(Debug, Serialize)]
pub struct Component {
    /// `Teredo`, `IP-HTTPS`, `IKE`, `NAT64`, `DNS64`, `GRE`.
    pub name: &'static str,
    /// `up`, `down` (configured but not working) or `off` (not configured).
    pub state: &'static str,
    /// What it is doing.
    pub detail: String,
}

/// One connected client.
#[derive(Debug, Serialize)]
pub struct ClientRow {
    /// The certificate subject it authenticated with.
    pub identity: Option<String>,
    /// `teredo`, `iphttps` or `other`.
    pub transport: String,
    /// Its outer address.
    pub outer: String,
    /// Its inner addresses.
    pub inner: Vec<IpAddr>,
    /// Seconds since its oldest child SA now up was installed.
    pub since_secs: u64,
    /// Inner bytes it sent over its child SAs now up.
    pub bytes_in: u64,
    /// Inner bytes sent to it.
    pub bytes_out: u64,
    /// Its tunnels up.
    pub tunnels: Vec<String>,
    /// How it authenticated: `certificate` or `eap`.
    pub auth_method: Option<String>,
    /// Its RADIUS User-Name, when RADIUS authenticated or authorized it.
    pub radius_user: Option<String>,
    /// The Filter-Id (policy name) its Access-Accept named.
    pub filter_id: Option<String>,
    /// The `[[policy]]` its traffic is under now (its Access-Accept's or a later CoA's).
    pub policy: Option<String>,
    /// That policy's rate limit, as `gate64 status` spells it.
    pub limit: Option<String>,
}

/// One point of the charts.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the Unix epoch.
    pub at: u64,
    /// Bytes per second received from clients (the internet side).
    pub rx_bytes_per_sec: f64,
    /// Bytes per second sent to clients.
    pub tx_bytes_per_sec: f64,
    /// Teredo clients.
    pub teredo_clients: u64,
    /// IP-HTTPS clients.
    pub iphttps_clients: u64,
}

/// What the page reads: the daemon's shared state, its counters and its IKE driver. A
/// daemon that is serving has its workers and listeners running (it stops when one fails),
/// so a configured transport is up; the IKE responder and the GRE tunnels are asked.
#[derive(Clone)]
pub struct Sources {
    /// The tables the workers share.
    pub shared: Arc<Shared>,
    /// The counters.
    pub exporter: Exporter,
    /// The IKE driver, while IPsec is configured.
    pub ike: Option<IkeControl>,
    /// Turns true when the daemon stops.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

/// How long the page waits for the IKE driver's list of SAs.
const IKE_TIMEOUT: Duration = Duration::from_secs(1);

/// Starts the refresher on the current tokio runtime and returns the handler's source.
pub fn start(sources: Sources, cfg: &Config) -> StatusJson {
    let latest = Arc::new(Mutex::new(String::from(
        r#"{"components":[],"clients":[],"history":[]}"#,
    )));
    let cfg = cfg.clone();
    let published = Arc::clone(&latest);
    let mut stop = sources.stop.clone();
    let daemon = sources;
    let base = Instant::now();
    // Milliseconds after `base` of the last request, plus one (0: none yet).
    let read_at = Arc::new(AtomicU64::new(0));
    let requests = Arc::clone(&read_at);
    tokio::spawn(async move {
        let mut history: VecDeque<Sample> = VecDeque::with_capacity(HISTORY);
        let mut last: Option<(Instant, u64, u64)> = None;
        let mut pace = Pace::default();
        let mut tick = tokio::time::interval(REFRESH);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            let now = Instant::now();
            let rx = daemon.exporter.bytes_total(Side::Internet, Direction::Rx);
            let tx = daemon.exporter.bytes_total(Side::Internet, Direction::Tx);
            let gauges = daemon.shared.gauges(now);
            if let Some((then, rx0, tx0)) = last {
                let secs = now.duration_since(then).as_secs_f64().max(0.001);
                if history.len() == HISTORY {
                    history.pop_front();
                }
                history.push_back(Sample {
                    at: SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs()),
                    rx_bytes_per_sec: rx.wrapping_sub(rx0) as f64 / secs,
                    tx_bytes_per_sec: tx.wrapping_sub(tx0) as f64 / secs,
                    teredo_clients: gauges.teredo_clients,
                    iphttps_clients: gauges.iphttps_clients,
                });
            }
            last = Some((now, rx, tx));
            let read = match read_at.load(Ordering::Relaxed) {
                0 => None,
                ms => Some(base + Duration::from_millis(ms - 1)),
            };
            if !pace.due(now, read) {
                continue;
            }
            let (d, c) = (daemon.clone(), cfg.clone());
            let samples: Vec<Sample> = history.iter().cloned().collect();
            // The snapshot asks the IKE driver for its SAs and may wait for it.
            let built = tokio::task::spawn_blocking(move || {
                let json = serde_json::to_string(&build(&d, &c, samples));
                // The document's rows and the IKE SAs listed for them were many small
                // blocks, now freed: give their pages back, or every rebuild at 100,000
                // clients leaves the RSS ~300 MB higher.
                gate64_sys::resource::release_free_heap();
                json
            })
            .await;
            pace.built(Instant::now(), now.elapsed());
            match built {
                Ok(Ok(json)) => *published.lock().unwrap_or_else(PoisonError::into_inner) = json,
                Ok(Err(e)) => tracing::warn!(error = %e, "status page not refreshed"),
                Err(e) => tracing::warn!(error = %e, "status page not refreshed"),
            }
        }
    });
    Arc::new(move || {
        let ms = u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        requests.store(ms.saturating_add(1), Ordering::Relaxed);
        latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    })
}

/// When the page's data is rebuilt next (see the module's documentation). Sans-IO.
#[derive(Debug, Default)]
struct Pace {
    /// When the last rebuild ended and what it took.
    last: Option<(Instant, Duration)>,
}

impl Pace {
    /// Whether to rebuild at `now`, the page last read at `read`.
    fn due(&self, now: Instant, read: Option<Instant>) -> bool {
        let Some((ended, took)) = self.last else {
            return true;
        };
        let watched = read.is_some_and(|t| now.saturating_duration_since(t) < WATCHED);
        let wait = if watched {
            REFRESH.max(took.saturating_mul(20))
        } else {
            UNWATCHED_REFRESH.max(took.saturating_mul(100))
        };
        // A tick may come a little early; half a tick of slack keeps the period REFRESH.
        now + REFRESH / 2 >= ended + wait
    }

    /// A rebuild ended at `now` after `took`.
    fn built(&mut self, now: Instant, took: Duration) {
        self.last = Some((now, took));
    }
}

/// The document for now.
fn build(daemon: &Sources, cfg: &Config, history: Vec<Sample>) -> StatusDoc {
    let now = Instant::now();
    let gauges = daemon.shared.gauges(now);
    let ike_sas = daemon.ike.as_ref().and_then(|c| c.ike_sas(IKE_TIMEOUT));
    let snapshot = crate::status::snapshot(&daemon.shared, ike_sas.as_deref(), now);
    let mut components = Vec::with_capacity(6);
    let on = |enabled: bool, working: bool| match (enabled, working) {
        (false, _) => "off",
        (true, true) => "up",
        (true, false) => "down",
    };
    components.push(Component {
        name: "Teredo",
        state: on(cfg.teredo.enabled, true),
        detail: format!(
            "{} clients, {} peers",
            gauges.teredo_clients, gauges.teredo_peers
        ),
    });
    components.push(Component {
        name: "IP-HTTPS",
        state: on(cfg.iphttps.enabled, true),
        detail: format!("{} clients", gauges.iphttps_clients),
    });
    components.push(Component {
        name: "IKE",
        state: on(cfg.ipsec.configured(), ike_sas.is_some()),
        detail: match ike_sas {
            Some(_) => format!(
                "{} IKE SAs, {} child SAs",
                snapshot.ike_sas, snapshot.child_sas
            ),
            None if cfg.ipsec.configured() => "the responder does not answer".to_owned(),
            None => String::new(),
        },
    });
    let nat = gauges.nat64.unwrap_or_default();
    components.push(Component {
        name: "NAT64",
        state: on(cfg.nat64.enabled, gauges.nat64.is_some()),
        detail: format!(
            "{} sessions, {} mappings",
            nat.sessions.iter().sum::<u64>(),
            nat.bib_entries.iter().sum::<u64>()
        ),
    });
    components.push(Component {
        name: "DNS64",
        state: on(cfg.dns64.enabled, true),
        detail: cfg
            .dns64
            .upstream
            .iter()
            .map(|u| u.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    });
    let (gre_up, gre_all) = daemon.exporter.gre_tunnels_up();
    components.push(Component {
        name: "GRE",
        state: on(!cfg.gre.tunnels.is_empty(), gre_up == gre_all),
        detail: format!("{gre_up} of {gre_all} tunnels up"),
    });
    let clients = snapshot
        .clients
        .into_iter()
        .map(|c| {
            let mut tunnels: Vec<String> = c.sas.iter().map(|s| s.tunnel.clone()).collect();
            tunnels.dedup();
            ClientRow {
                identity: c.sas.iter().find_map(|s| s.identity.clone()),
                transport: c.transport,
                outer: c.outer.to_string(),
                inner: c.inner,
                since_secs: c.sas.iter().map(|s| s.age_secs).max().unwrap_or(0),
                bytes_in: c.sas.iter().map(|s| s.bytes_in).sum(),
                bytes_out: c.sas.iter().map(|s| s.bytes_out).sum(),
                tunnels,
                auth_method: c.sas.iter().find_map(|s| s.auth_method.clone()),
                radius_user: c.sas.iter().find_map(|s| s.radius_user.clone()),
                filter_id: c.sas.iter().find_map(|s| s.filter_id.clone()),
                policy: c.sas.iter().find_map(|s| s.policy.clone()),
                limit: c.sas.iter().find_map(|s| s.limit.clone()),
            }
        })
        .collect();
    StatusDoc {
        components,
        clients,
        history,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_build_is_due_at_once() {
        assert!(Pace::default().due(Instant::now(), None));
    }

    /// Read: every REFRESH while a rebuild is cheap, every 20 times its cost when it is not.
    #[test]
    fn a_read_page_is_rebuilt_every_refresh_or_twenty_times_its_cost() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.built(t0, Duration::from_millis(10));
        let read = Some(t0);
        assert!(!pace.due(t0 + Duration::from_millis(500), read));
        assert!(pace.due(t0 + REFRESH, read));
        pace.built(t0, Duration::from_secs(3));
        assert!(!pace.due(
            t0 + Duration::from_secs(30),
            Some(t0 + Duration::from_secs(29))
        ));
        assert!(pace.due(
            t0 + Duration::from_secs(60),
            Some(t0 + Duration::from_secs(59))
        ));
    }

    /// Unread: every UNWATCHED_REFRESH, or 100 times its cost; a new read brings the
    /// period back to REFRESH.
    #[test]
    fn an_unread_page_is_rebuilt_rarely() {
        let t0 = Instant::now() + WATCHED;
        let mut pace = Pace::default();
        pace.built(t0, Duration::from_millis(10));
        let soon = t0 + Duration::from_secs(10);
        assert!(!pace.due(soon, None));
        let long_ago = soon - WATCHED - Duration::from_secs(1);
        assert!(
            !pace.due(soon, Some(long_ago)),
            "read more than WATCHED ago"
        );
        assert!(pace.due(soon, Some(soon)), "read again");
        assert!(pace.due(t0 + UNWATCHED_REFRESH, None));
        pace.built(t0, Duration::from_secs(3));
        assert!(!pace.due(t0 + Duration::from_secs(200), None));
        assert!(pace.due(t0 + Duration::from_secs(300), None));
    }
}
