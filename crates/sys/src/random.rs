//! The kernel's random source (`getrandom(2)`), for DNS64's upstream query ids and ports.

use std::io;

/// Fills `buf` from the kernel's random source (`getrandom(2)`, no flags: blocks only before
/// the pool is initialized at boot).
pub fn getrandom(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is a live, writable buffer of the given length.
        let r = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += r as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrandom_fills_the_buffer() {
        // 64 zero bytes from a working source have probability 2^-512.
        let mut buf = [0u8; 64];
        getrandom(&mut buf).unwrap();
        assert!(buf.iter().any(|&b| b != 0));
    }
}
