//! gate64-esp's receive path on malformed packets: `spi_of`, `Inbound::authentic` (the HA
//! standby's check, which must move nothing and pass whatever opens), `Inbound::open`
//! (replay window, ESN reconstruction, trailer checks) and the selector checks on whatever opens; plus seal ->
//! mutate -> open round trips. Under `cfg(fuzzing)` the AEAD is a null cipher, so arbitrary
//! bytes reach the code behind the ICV check.
//! Input: `[mode][bytes]`. Mode bits 0-1 pick the case: 0 raw bytes, 1 raw bytes with the SA's
//! SPI written over the first word (reaches replay and trailer logic), 2 and 3 seal `bytes[3..]`
//! as the inner packet at offset `bytes[0] % 64`, flip byte `bytes[1]` with mask `bytes[2]`
//! (mask 0 = untouched) and open with a fresh receiver. Bit 2 picks the ESN SA, bit 3 an
//! AES-CBC + HMAC-SHA2-256 SA instead of AES-GCM (under `cfg(fuzzing)` its ICV is not checked
//! and its payload stays in clear, as the AEAD's); bit 4 an AES-GMAC (integrity only) SA,
//! whose ICV is likewise unchecked. The SAs persist across runs, so the raw
//! modes move their windows as a real receiver's move.
#![no_main]

use std::net::IpAddr;
use std::sync::LazyLock;
use std::time::Instant;

use gate64_esp::{
    Cipher, ICV_LEN, Inbound, Lifetime, OpenError, Outbound, SaKeys, SaParams, Selector,
    inner_addrs, spi_of,
};
use libfuzzer_sys::fuzz_target;

const SPI: u32 = 0x0000_4321;

struct Sa {
    params: SaParams,
    out: Outbound,
    inbound: Inbound,
}

fn sa(cipher: Cipher, esn: bool) -> Sa {
    let p = SaParams {
        spi: SPI,
        keys: SaKeys {
            cipher,
            key: (0..cipher.keymat_len() as u8).collect(),
        },
        esn,
        lifetime: Lifetime::UNLIMITED,
        created: Instant::now(),
        local_ts: vec![Selector::prefix("fd00:c0::/64".parse().unwrap())],
        remote_ts: vec![Selector::prefix("fd00:c1::/120".parse().unwrap())],
    };
    Sa {
        out: Outbound::new(&p).unwrap(),
        inbound: Inbound::new(&p).unwrap(),
        params: p,
    }
}

static PLAIN: LazyLock<Sa> = LazyLock::new(|| sa(Cipher::AesGcm16_256, false));
static ESN: LazyLock<Sa> = LazyLock::new(|| sa(Cipher::AesGcm16_256, true));
static CBC_PLAIN: LazyLock<Sa> = LazyLock::new(|| sa(Cipher::AesCbc256HmacSha256, false));
static CBC_ESN: LazyLock<Sa> = LazyLock::new(|| sa(Cipher::AesCbc128HmacSha256, true));
static GMAC_PLAIN: LazyLock<Sa> = LazyLock::new(|| sa(Cipher::NullAesGmac256, false));
static GMAC_ESN: LazyLock<Sa> = LazyLock::new(|| sa(Cipher::NullAesGmac128, true));

fn open_and_check(inbound: &Inbound, out: &Outbound, esp: &mut [u8]) -> Result<(), OpenError> {
    let len = esp.len();
    let cipher = inbound.cipher();
    let h = cipher.header_len();
    let before = inbound.highest_seq();
    // The standby's check (one ICV check on a copy) moves nothing, and passes whatever
    // opens.
    let authentic = inbound.authentic(&mut esp.to_vec());
    assert_eq!(inbound.highest_seq(), before);
    let r = inbound.open(esp);
    match &r {
        Ok(o) => {
            assert!(authentic, "opened but not authentic");
            assert!(o.inner.start == h && o.inner.end + 2 + ICV_LEN <= len);
            if cipher.is_cbc() {
                assert_eq!((len - h - ICV_LEN) % 16, 0);
            }
            assert!(inbound.highest_seq() >= before);
            if let Some((src, dst)) = inner_addrs(&esp[o.inner.clone()], o.next_header) {
                let _ = inbound.admits(src, dst);
                let _ = out.covers(src, dst);
            }
        }
        Err(OpenError::Truncated) => {
            let min_body = if cipher.is_cbc() { 16 } else { 2 };
            assert!(len < h + min_body + ICV_LEN)
        }
        // Only an authentic packet moves the window; one with a bad trailer (Malformed) or
        // past the byte limit (Expired) is authentic and has used its sequence number.
        Err(OpenError::Replay | OpenError::Auth) => assert_eq!(inbound.highest_seq(), before),
        Err(_) => {}
    }
    r.map(|_| ())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let sa: &Sa = match (mode & 16 != 0, mode & 8 != 0, mode & 4 != 0) {
        (false, false, false) => &PLAIN,
        (false, false, true) => &ESN,
        (false, true, false) => &CBC_PLAIN,
        (false, true, true) => &CBC_ESN,
        (true, _, false) => &GMAC_PLAIN,
        (true, _, true) => &GMAC_ESN,
    };
    let h = sa.out.header_len();
    let max_trailer = sa.out.cipher().max_trailer();
    let _ = spi_of(rest);
    match mode & 3 {
        0 => {
            let _ = open_and_check(&sa.inbound, &sa.out, &mut rest.to_vec());
        }
        1 => {
            let mut esp = rest.to_vec();
            if let Some(head) = esp.get_mut(..4) {
                head.copy_from_slice(&SPI.to_be_bytes());
            }
            let _ = open_and_check(&sa.inbound, &sa.out, &mut esp);
        }
        _ => {
            let [at, pos, mask, inner @ ..] = rest else {
                return;
            };
            let at = usize::from(*at % 64);
            let nh = if inner.first().is_some_and(|b| b >> 4 == 4) {
                4
            } else {
                41
            };
            let mut buf = vec![0u8; at + h + inner.len() + max_trailer];
            buf[at + h..][..inner.len()].copy_from_slice(inner);
            let Ok(len) = sa.out.seal(&mut buf, at, inner.len(), nh) else {
                return;
            };
            assert!(len <= h + inner.len() + max_trailer);
            let esp = &mut buf[at..at + len];
            assert_eq!(spi_of(esp), Some(SPI));
            let i = usize::from(*pos) % len;
            esp[i] ^= mask;
            // A receiver of its own: with the null cipher a flipped sequence number is
            // "authentic" and would move a shared window past later untouched packets.
            let inbound = Inbound::new(&sa.params).unwrap();
            let r = open_and_check(&inbound, &sa.out, esp);
            if *mask == 0 {
                // Untouched, and its sequence number is new: it opens to what was sealed.
                assert_eq!(r, Ok(()));
                assert_eq!(&esp[h..][..inner.len()], inner);
                if let Some((src, _)) = inner_addrs(inner, nh) {
                    assert_eq!(
                        inbound.admits(src, "fd00:c0::1".parse::<IpAddr>().unwrap()),
                        Selector::prefix("fd00:c1::/120".parse().unwrap()).covers(src)
                    );
                }
            }
        }
    }
});
