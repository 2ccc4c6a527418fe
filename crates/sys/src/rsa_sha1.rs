//! RSASSA-PKCS1-v1_5 signatures over SHA-1 with aws-lc's `RSA_sign`: IKEv2's AUTH method 1
//! (RFC 7296 §3.8) is defined with SHA-1, and aws-lc-rs, which does every other signature of
//! the workspace, offers no SHA-1 RSA signing encoding. The key is parsed and the signature
//! made by the same library aws-lc-rs wraps (blinded, constant-time private key operation),
//! through its C API.

use aws_lc_sys as ffi;
use std::fmt;
use std::io;

/// An RSA private key that signs SHA-1 digests with PKCS#1 v1.5 padding.
pub struct RsaSha1Signer {
    /// Owned: freed on drop, never null.
    rsa: *mut ffi::RSA,
}

// SAFETY: aws-lc's RSA objects may be used from several threads at once for private key
// operations (its blinding state is guarded by the object's own lock); the pointer is owned
// and only freed on drop, which needs `&mut self`.
unsafe impl Send for RsaSha1Signer {}
// SAFETY: as above: `sign` takes `&self` and aws-lc locks what signing mutates.
unsafe impl Sync for RsaSha1Signer {}

impl fmt::Debug for RsaSha1Signer {
    /// Never prints key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RsaSha1Signer")
            .field("bits", &self.bits())
            .finish()
    }
}

impl RsaSha1Signer {
    /// Parses an unencrypted RSA private key: PKCS#1 `RSAPrivateKey` DER when `pkcs1`, else
    /// PKCS#8 `PrivateKeyInfo` DER. The whole input must be the key, and the key must pass
    /// aws-lc's consistency check.
    pub fn from_der(der: &[u8], pkcs1: bool) -> io::Result<Self> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let mut cbs = ffi::CBS {
            data: std::ptr::null(),
            len: 0,
        };
        // SAFETY: `cbs` is a live CBS; `der` outlives every use of it below (the parsers copy
        // what they keep).
        unsafe { ffi::CBS_init(&mut cbs, der.as_ptr(), der.len()) };
        let rsa = if pkcs1 {
            // SAFETY: `cbs` was initialized above; the result is null or an owned RSA.
            unsafe { ffi::RSA_parse_private_key(&mut cbs) }
        } else {
            // SAFETY: as above, an owned EVP_PKEY or null.
            let pkey = unsafe { ffi::EVP_parse_private_key(&mut cbs) };
            if pkey.is_null() {
                return Err(bad("not a PKCS#8 private key"));
            }
            // SAFETY: `pkey` is a live EVP_PKEY; get1 takes its own reference to the RSA (null
            // when the key is not RSA), so freeing `pkey` right after leaves that valid.
            let rsa = unsafe { ffi::EVP_PKEY_get1_RSA(pkey) };
            // SAFETY: `pkey` is owned here and not used again.
            unsafe { ffi::EVP_PKEY_free(pkey) };
            rsa
        };
        if rsa.is_null() {
            return Err(bad("not an RSA private key"));
        }
        let signer = Self { rsa };
        // SAFETY: `cbs` is live; it tells how much input the parser left.
        if unsafe { ffi::CBS_len(&cbs) } != 0 {
            return Err(bad("bytes after the private key"));
        }
        // SAFETY: `signer.rsa` is a live RSA.
        if unsafe { ffi::RSA_check_key(signer.rsa) } != 1 {
            return Err(bad("inconsistent RSA private key"));
        }
        Ok(signer)
    }

    /// The modulus length in bits.
    pub fn bits(&self) -> u32 {
        // SAFETY: `self.rsa` is a live RSA.
        unsafe { ffi::RSA_bits(self.rsa) }
    }

    /// The RSASSA-PKCS1-v1_5 signature of `msg` with SHA-1 (RFC 8017 §8.2), as long as the
    /// modulus.
    pub fn sign(&self, msg: &[u8]) -> io::Result<Vec<u8>> {
        let mut digest = [0u8; 20];
        // SAFETY: `msg` is readable for its length; `digest` has the 20 bytes SHA-1 writes.
        unsafe { ffi::SHA1(msg.as_ptr(), msg.len(), digest.as_mut_ptr()) };
        // SAFETY: `self.rsa` is a live RSA.
        let size = unsafe { ffi::RSA_size(self.rsa) } as usize;
        let mut out = vec![0u8; size];
        let mut out_len: std::os::raw::c_uint = 0;
        // SAFETY: `digest` is readable for its length; `out` has the RSA_size bytes RSA_sign
        // may write; `out_len` is a live c_uint; `self.rsa` is a live RSA.
        let ok = unsafe {
            ffi::RSA_sign(
                ffi::NID_sha1,
                digest.as_ptr(),
                digest.len(),
                out.as_mut_ptr(),
                &mut out_len,
                self.rsa,
            )
        };
        if ok != 1 {
            return Err(io::Error::other("RSA_sign failed"));
        }
        out.truncate(out_len as usize);
        Ok(out)
    }
}

impl Drop for RsaSha1Signer {
    fn drop(&mut self) {
        // SAFETY: `self.rsa` is owned, live, and not used after this.
        unsafe { ffi::RSA_free(self.rsa) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_refused_as_either_encoding() {
        for pkcs1 in [true, false] {
            assert!(RsaSha1Signer::from_der(b"", pkcs1).is_err());
            assert!(RsaSha1Signer::from_der(&[0x30, 0x03, 0x02, 0x01, 0x00], pkcs1).is_err());
        }
    }
}
