//! The configuration loader on arbitrary text: the TOML file is parsed and resolved against
//! default flags, and `cores` lists are parsed. Nothing may panic; whatever resolves has passed
//! validation (its limits hold).
#![no_main]

use libfuzzer_sys::fuzz_target;
use punctual::config::{parse_cores, Config, FileConfig, ServeArgs};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_cores(text);
    if let Ok(file) = FileConfig::parse(text, "fuzz.toml") {
        if let Ok(c) = Config::resolve(file, &ServeArgs::default()) {
            assert!(c.shards >= 1 && c.shards <= 1024);
            assert!(c.max_body_bytes >= 1024);
        }
    }
});
