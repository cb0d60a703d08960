//! Fuzz target `config`: the configuration loader, file plus environment
//! (`Config::from_toml`, `src/config/load.rs`), with every rule it applies.
//!
//! Input: the TOML text, optionally followed by a NUL byte and environment overrides, one
//! `NAME=value` per line (the process environment is never read or changed).
//!
//! What must hold: nothing panics; a refusal is `BridgeError::Config` naming a field.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mongo_kafka_bridge::{BridgeError, Config};

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let (text, env) = input.split_once('\0').unwrap_or((input, ""));
    let env: Vec<(String, String)> = env
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    match Config::from_toml(text, env) {
        Ok(_) => {}
        Err(BridgeError::Config { field, .. }) => assert!(!field.is_empty(), "an unnamed field"),
        Err(other) => panic!("not a configuration error: {other:?}"),
    }
});
