//! The IKE driver's worker threads: the responder's CPU-heavy steps run here, beside the IKE
//! task, so IKE set-up scales with the cores and the task keeps answering liveness checks
//! and established SAs while they run. Two kinds of job: an IKE_SA_INIT's key exchange and
//! key derivation ([`InitJob`], tens of microseconds with ECP-256, milliseconds with
//! MODP-2048) and an IKE_AUTH's chain building and signature checks, then our own AUTH
//! signature once the client verified ([`AuthJob`], milliseconds each), with its OCSP lookup.
//!
//! Bounded before a job is queued. An [`InitJob`] was already counted as a half-open IKE SA
//! by the responder (its cookie, per-source and per-host half-open limits applied first), and
//! at most [`JOBS_PER_THREAD`] per thread are in flight; one beyond is shed
//! (`gate64_ike_shed_total{reason="init_queue_full"}`). An [`AuthJob`] is bounded twice
//! ([`AuthQueue`]): at most [`JOBS_PER_SOURCE`] jobs of
//! one source (an IPv4 address, an IPv6 /64, a Teredo mapping) in flight, at most
//! [`JOBS_PER_HOST`] of one host (all Teredo mappings of one public IPv4 address, all /64s
//! of one IPv6 /48: one host can open a mapping per port), and at most
//! [`JOBS_PER_THREAD`] per thread in all. A job beyond either is shed
//! (`gate64_ike_shed_total{reason="auth_queue_source"|"auth_queue_full"}`, a host's
//! counted as `auth_queue_source`). A shed job of either kind is handed back
//! to the responder, which forgets its request as if it had been lost: the client's
//! retransmission, a second or so later, tries again.

use std::collections::HashMap;
use std::io;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};

use super::ocsp::OcspChecker;
use gate64_dataplane::IkeShedReason;
use gate64_ike::responder::{
    AuthJob, AuthVerdict, HostCounts, Hosts, InitJob, InitVerdict, SourceKey,
};
use std::time::{Instant, SystemTime};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Jobs of one source in flight: a client's two tunnels authenticate at the same time.
pub(crate) const JOBS_PER_SOURCE: usize = 2;
/// Jobs of one host in flight ([`gate64_ike::responder::HostKey`]): a few clients behind one
/// NAT or in one site.
pub(crate) const JOBS_PER_HOST: usize = 4;
/// Jobs in flight per thread: at a millisecond or two per job, a queue this long waits some
/// tens of milliseconds, well within a client's first retransmission.
pub(crate) const JOBS_PER_THREAD: usize = 16;

/// How many jobs are in flight, per source and in total. Sans-IO.
#[derive(Debug)]
pub(crate) struct AuthQueue {
    hosts: Hosts,
    total_cap: usize,
    total: usize,
    by_source: HashMap<SourceKey, usize>,
    /// Jobs per host; entries only while non-zero, no more than `total_cap`.
    by_host: HostCounts,
}

impl AuthQueue {
    /// At most `total_cap` jobs in flight; sources aggregate into hosts by `hosts`.
    pub(crate) fn new(total_cap: usize, hosts: Hosts) -> Self {
        AuthQueue {
            hosts,
            total_cap,
            total: 0,
            by_source: HashMap::new(),
            by_host: HostCounts::new(),
        }
    }

    /// Counts a job of `key` in, or says why it does not fit.
    pub(crate) fn admit(&mut self, key: SourceKey) -> Result<(), IkeShedReason> {
        if self.total >= self.total_cap {
            return Err(IkeShedReason::AuthQueueFull);
        }
        if self.by_source.get(&key).copied().unwrap_or(0) >= JOBS_PER_SOURCE {
            return Err(IkeShedReason::AuthQueueSource);
        }
        if let Some(h) = self.hosts.of(key)
            && !self.by_host.try_admit(h, JOBS_PER_HOST)
        {
            return Err(IkeShedReason::AuthQueueSource);
        }
        *self.by_source.entry(key).or_insert(0) += 1;
        self.total += 1;
        Ok(())
    }

    /// Counts a job of `key` out (its verdict came back, or it could not be queued).
    pub(crate) fn done(&mut self, key: SourceKey) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.by_source.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_source.remove(&key);
            }
        }
        if let Some(h) = self.hosts.of(key) {
            self.by_host.release(h);
        }
    }
}

/// A job for a worker thread.
#[derive(Debug)]
enum Job {
    Init(InitJob),
    /// Boxed: an IKE_AUTH's job is three times the size of a key exchange's.
    Auth(Box<AuthJob>),
}

/// What a worker thread computed, for the responder.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// An IKE_SA_INIT's key exchange ([`gate64_ike::responder::Responder::handle_init_verdict`]).
    Init(InitVerdict),
    /// An IKE_AUTH's verification ([`gate64_ike::responder::Responder::handle_auth_verdict`]).
    Auth(AuthVerdict),
}

/// A verdict on its way back, with what counts its job out: the source of an IKE_AUTH's, none
/// for an IKE_SA_INIT's.
type Done = (Option<SourceKey>, Verdict);

/// The threads, the queue to them and the verdicts back.
#[derive(Debug)]
pub(crate) struct AuthPool {
    jobs: SyncSender<Job>,
    verdicts: UnboundedReceiver<Done>,
    queue: AuthQueue,
    /// Key exchanges in flight, at most `init_cap`.
    inits: usize,
    init_cap: usize,
}

impl AuthPool {
    /// Starts `threads` worker threads (at least one); jobs in flight are capped per source
    /// and per host (`hosts`). The threads end once the pool is dropped and the jobs queued
    /// before have run.
    pub(crate) fn start(
        threads: usize,
        hosts: Hosts,
        ocsp: Option<Arc<OcspChecker>>,
    ) -> io::Result<Self> {
        let threads = threads.max(1);
        let cap = threads.saturating_mul(JOBS_PER_THREAD);
        // Room for both kinds' caps: `try_send` never finds the channel full.
        let (jobs, rx) = sync_channel::<Job>(cap.saturating_mul(2));
        let rx = Arc::new(Mutex::new(rx));
        let (tx, verdicts) = unbounded_channel();
        for n in 0..threads {
            let (rx, tx, ocsp) = (Arc::clone(&rx), tx.clone(), ocsp.clone());
            std::thread::Builder::new()
                .name(format!("gate64-ike-work-{n}"))
                .spawn(move || work(&rx, &tx, ocsp.as_deref()))?;
        }
        Ok(AuthPool {
            jobs,
            verdicts,
            queue: AuthQueue::new(cap, hosts),
            inits: 0,
            init_cap: cap,
        })
    }

    /// Queues `job`, or hands it back (boxed: the refusal is the rare path) with why it was
    /// shed.
    pub(crate) fn submit(&mut self, job: AuthJob) -> Result<(), (Box<AuthJob>, IkeShedReason)> {
        let key = job.source_key();
        if let Err(reason) = self.queue.admit(key) {
            return Err((Box::new(job), reason));
        }
        match self.jobs.try_send(Job::Auth(Box::new(job))) {
            Ok(()) => Ok(()),
            // The channel holds as many as the caps admit, so this is the threads gone.
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                self.queue.done(key);
                match job {
                    Job::Auth(job) => Err((job, IkeShedReason::AuthQueueFull)),
                    // Never: the job sent is the one handed back.
                    Job::Init(_) => Ok(()),
                }
            }
        }
    }

    /// Queues the key exchange `job`, or hands it back when the queue is full.
    pub(crate) fn submit_init(
        &mut self,
        job: InitJob,
    ) -> Result<(), (Box<InitJob>, IkeShedReason)> {
        if self.inits >= self.init_cap {
            return Err((Box::new(job), IkeShedReason::InitQueueFull));
        }
        match self.jobs.try_send(Job::Init(job)) {
            Ok(()) => {
                self.inits += 1;
                Ok(())
            }
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => match job {
                Job::Init(job) => Err((Box::new(job), IkeShedReason::InitQueueFull)),
                // Never: the job sent is the one handed back.
                Job::Auth(_) => Ok(()),
            },
        }
    }

    /// The next verdict (cancel-safe).
    pub(crate) async fn verdict(&mut self) -> Option<Verdict> {
        let done = self.verdicts.recv().await?;
        Some(self.count_out(done))
    }

    /// A verdict that is ready, without waiting.
    pub(crate) fn ready_verdict(&mut self) -> Option<Verdict> {
        match self.verdicts.try_recv() {
            Ok(done) => Some(self.count_out(done)),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => None,
        }
    }

    fn count_out(&mut self, (key, verdict): Done) -> Verdict {
        match key {
            Some(key) => self.queue.done(key),
            None => self.inits = self.inits.saturating_sub(1),
        }
        verdict
    }
}

/// One thread: runs jobs (and the OCSP lookups of IKE_AUTH's) until the pool is gone. A job
/// whose IKE SA no longer waits for it (gone, or past its deadline) is skipped, before its
/// verification or before its OCSP lookup, and its verdict, which finishes nothing, still
/// goes back so that the queue counts it out; the lookup ends by the IKE SA's deadline.
fn work(rx: &Mutex<Receiver<Job>>, tx: &UnboundedSender<Done>, ocsp: Option<&OcspChecker>) {
    loop {
        let job = match rx.lock().unwrap_or_else(PoisonError::into_inner).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let done = match job {
            Job::Init(job) => (None, Verdict::Init(job.run())),
            Job::Auth(job) => (Some(job.source_key()), Verdict::Auth(run(*job, ocsp))),
        };
        if tx.send(done).is_err() {
            return;
        }
    }
}

/// `job`'s verdict, OCSP applied, or skipped when its IKE SA no longer waits for it.
fn run(job: AuthJob, ocsp: Option<&OcspChecker>) -> AuthVerdict {
    let watch = job.watch();
    if watch.is_abandoned(Instant::now()) {
        return job.skip();
    }
    let mut verdict = job.run();
    if let Some(ocsp) = ocsp {
        if watch.is_abandoned(Instant::now()) {
            verdict.skip();
        } else {
            ocsp.apply(&mut verdict, SystemTime::now(), &watch);
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> SourceKey {
        SourceKey::of(s.parse().expect("ip"))
    }

    #[test]
    fn a_source_gets_its_share_and_the_total_is_bounded() {
        let mut q = AuthQueue::new(3, Hosts::default());
        let a = key("2001:db8:1::1");
        assert_eq!(q.admit(a), Ok(()));
        assert_eq!(
            q.admit(key("2001:db8:1::2")),
            Ok(()),
            "same /64, its share is 2"
        );
        assert_eq!(q.admit(a), Err(IkeShedReason::AuthQueueSource));
        assert_eq!(q.admit(key("192.0.2.1")), Ok(()));
        assert_eq!(q.admit(key("192.0.2.2")), Err(IkeShedReason::AuthQueueFull));
        q.done(a);
        assert_eq!(q.admit(key("192.0.2.2")), Ok(()));
        for k in ["2001:db8:1::1", "192.0.2.1", "192.0.2.2"] {
            q.done(key(k));
        }
        assert_eq!((q.total, q.by_source.len(), q.by_host.len()), (0, 0, 0));
    }

    /// The Teredo address of mapping `ipv4:port` (RFC 4380 §4: both stored inverted).
    fn teredo(ipv4: [u8; 4], port: u16) -> SourceKey {
        let p = (!port).to_be_bytes();
        let a = (!u32::from_be_bytes(ipv4)).to_be_bytes();
        let o = [
            0x20, 0x01, 0, 0, 0x41, 0x36, 0xe3, 0x78, 0x80, 0, p[0], p[1], a[0], a[1], a[2], a[3],
        ];
        SourceKey::of(std::net::Ipv6Addr::from(o).into())
    }

    /// One host behind one IPv4 address opens a Teredo mapping per port: 200 ports of it get
    /// no more than the per-host share of the queue; a client of another address still gets
    /// in.
    #[test]
    fn all_teredo_ports_of_one_ipv4_share_one_host_bound() {
        let mut q = AuthQueue::new(64, Hosts::default());
        let admitted = (40_000..40_200)
            .filter(|&port| q.admit(teredo([192, 0, 2, 45], port)).is_ok())
            .count();
        assert_eq!(admitted, JOBS_PER_HOST);
        assert_eq!(q.admit(teredo([198, 51, 100, 7], 40_000)), Ok(()));
        let site = (1..=50u16)
            .filter(|n| q.admit(key(&format!("2001:db8:1:{n:x}::1"))).is_ok())
            .count();
        assert_eq!(site, JOBS_PER_HOST, "the /64s of one /48");
    }

    /// The /64s of the IP-HTTPS pool each hold their own share of the queue, not one /48's.
    #[test]
    fn leased_iphttps_64s_are_not_one_site() {
        let pool = "2001:db8:8000::/40".parse().expect("prefix");
        let mut q = AuthQueue::new(64, Hosts::new(Some(pool)));
        let leased = (1..=20u16)
            .filter(|n| q.admit(key(&format!("2001:db8:8000:{n:x}::1"))).is_ok())
            .count();
        assert_eq!(leased, 20);
    }
}
