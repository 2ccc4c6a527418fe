//! Configuration parsing and validation never panics, whatever the file holds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match gate64_config::Config::from_toml_str(&text) {
        Ok(cfg) => drop(format!("{cfg:?}")),
        // Rendering the error (it quotes the offending value) must not panic either.
        Err(e) => drop(e.to_string()),
    }
});
