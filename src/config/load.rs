//! Loading the configuration: the TOML file, then `MONGO_KAFKA_BRIDGE__SECTION__KEY`
//! environment overrides, then every rule ([`Config::validate`]).
//!
//! Environment overrides: `MONGO_KAFKA_BRIDGE__MONGODB__URI`, `…__KAFKA__BOOTSTRAP_SERVERS`,
//! `…__KAFKA__TOPIC_PREFIX`, `…__BRIDGE__COMMIT_INTERVAL_MS`, `…__METRICS__LISTEN`, and any
//! librdkafka property as `…__KAFKA__PROPERTIES__SASL_PASSWORD` (after `PROPERTIES__` the name is
//! lowercased and `_` becomes `.`: `sasl.password`). Pipelines are configured in the file only.
//!
//! Invariants: every error names the TOML path of the field (or `--config` when the file cannot
//! be read or is not TOML), and the environment variable when one set the bad value; a variable
//! that looks meant as an override but is not one is an error, never silently ignored.

use std::path::Path;

use super::{Config, ENV_PREFIX, Settings, group};
use crate::error::BridgeError;

impl Config {
    /// Reads `path`, applies environment overrides from the process environment, validates.
    ///
    /// Errors: [`BridgeError::Config`] naming the field (or `--config` when the file cannot be
    /// read or is not TOML).
    pub fn load(path: &Path) -> Result<Self, BridgeError> {
        let text = std::fs::read_to_string(path).map_err(|e| BridgeError::Config {
            field: "--config".into(),
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        let mut config = Self::from_toml(&text, std::env::vars()).map_err(|e| match e {
            // A value an environment variable set is not the file's: the error names the variable.
            BridgeError::Config { field, reason } if !reason.contains(SET_BY) => {
                BridgeError::Config {
                    field,
                    reason: format!("{reason} (in {})", path.display()),
                }
            }
            other => other,
        })?;
        config.source = Some(path.to_owned());
        Ok(config)
    }

    /// `text` with the remedies' `--config FILE` naming the file in use (when loaded from one).
    pub fn with_config_path(&self, text: &str) -> String {
        match &self.source {
            Some(path) => text.replace("--config FILE", &format!("--config {}", path.display())),
            None => text.to_owned(),
        }
    }

    /// Parses TOML text, applies `MONGO_KAFKA_BRIDGE__*` overrides from `env`, validates.
    pub fn from_toml(
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, BridgeError> {
        let mut tree: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| BridgeError::Config {
                    field: "--config".into(),
                    reason: format!("not valid TOML: {e}"),
                })?;
        let env: Vec<(String, String)> = env.into_iter().collect();
        let overrides = apply_env(&mut tree, env.iter().cloned())?;
        super::debezium::default_capture_mode(&mut tree);
        let mut settings = tree.clone();
        settings.remove("pipelines");
        let lease_set = tree.get("bridge").and_then(|b| b.get("lease_ms")).is_some();
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(tree))
            .map_err(|e| {
                let path = e.path().to_string();
                let reason =
                    super::suggest::with_suggestion(e.into_inner().message().to_owned(), &path);
                overrides.name_variable(BridgeError::Config {
                    field: field_path(&path, &reason),
                    reason,
                })
            })?;
        config.settings = Settings(settings);
        for fields in config
            .pipelines
            .iter_mut()
            .filter_map(|p| p.fields.as_mut())
        {
            let var = fields.hash_key_env.as_deref();
            fields.env_key = env
                .iter()
                .find(|(k, _)| Some(k.as_str()) == var)
                .map(|(_, v)| v.clone());
        }
        if !lease_set {
            group::default_lease(&mut config);
        }
        config.validate().map_err(|e| overrides.name_variable(e))?;
        Ok(config)
    }
}

/// The TOML path an error is about: serde reports a missing field at its parent (`mongodb`, or
/// `.` at the top), so the field's own name is appended from the message.
fn field_path(parent: &str, reason: &str) -> String {
    let parent = if parent == "." { "" } else { parent };
    let missing = reason
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match (parent, missing) {
        ("", Some(name)) => name.to_owned(),
        (parent, Some(name)) => format!("{parent}.{name}"),
        ("", None) => "(top level)".to_owned(),
        (parent, None) => parent.to_owned(),
    }
}

/// Applies `MONGO_KAFKA_BRIDGE__SECTION__KEY=value` overrides to the parsed file.
///
/// In `[bridge]` (all integers) and for `*_ms` keys, values that parse as an integer become one;
/// every other value is a string.
fn apply_env(
    tree: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Overrides, BridgeError> {
    let mut applied = Overrides::default();
    for (name, raw) in env {
        let Some(path) = name.strip_prefix(ENV_PREFIX) else {
            if name
                .to_ascii_uppercase()
                .starts_with(ENV_PREFIX.trim_end_matches('_'))
            {
                // Meant as an override, but it would be ignored: say so.
                return Err(BridgeError::config(
                    name,
                    "is not an override, which takes the form MONGO_KAFKA_BRIDGE__SECTION__KEY \
                     (upper case, two underscores between parts): rename or unset it",
                ));
            }
            continue;
        };
        let parts: Vec<&str> = path.split("__").collect();
        let (section, key) = match parts.as_slice() {
            [section, key] => (section.to_ascii_lowercase(), key.to_ascii_lowercase()),
            [kafka, props, key]
                if kafka.eq_ignore_ascii_case("kafka")
                    && props.eq_ignore_ascii_case("properties") =>
            {
                let table = section_table(tree, "kafka");
                let props = table
                    .entry("properties")
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                let toml::Value::Table(props) = props else {
                    return Err(BridgeError::config(
                        "kafka.properties",
                        "must be a table of librdkafka properties",
                    ));
                };
                let key = key.to_ascii_lowercase().replace('_', ".");
                applied
                    .0
                    .push((format!("kafka.properties.\"{key}\""), name.clone()));
                props.insert(key, toml::Value::String(raw));
                continue;
            }
            _ => {
                return Err(BridgeError::config(
                    name.clone(),
                    "environment overrides take the form MONGO_KAFKA_BRIDGE__SECTION__KEY \
                     (pipelines are configured in the file only)",
                ));
            }
        };
        if section == "pipelines" {
            return Err(BridgeError::config(
                name,
                "pipelines are configured in the file only",
            ));
        }
        // Only `[bridge]` and durations (`*_ms`) hold numbers: elsewhere a value such as a topic
        // prefix `2024` or a database `true` stays a string.
        let value = match raw.parse::<i64>() {
            Ok(i) if (section == "bridge" && key != "group_id") || key.ends_with("_ms") => {
                toml::Value::Integer(i)
            }
            _ => toml::Value::String(raw),
        };
        applied.0.push((format!("{section}.{key}"), name.clone()));
        section_table(tree, &section).insert(key, value);
    }
    Ok(applied)
}

/// How an error about a value an environment variable set ends: `" (set by the environment
/// variable NAME)"`.
const SET_BY: &str = " (set by the environment variable ";

/// The fields environment overrides set: `(field, variable)`, the field as configuration
/// errors name it (`bridge.commit_interval_ms`, `kafka.properties."linger.ms"`).
#[derive(Debug, Default)]
struct Overrides(Vec<(String, String)>);

impl Overrides {
    /// `error` naming the environment variable when its field was set by one (the file does
    /// not hold the bad value then).
    fn name_variable(&self, error: BridgeError) -> BridgeError {
        match error {
            BridgeError::Config { field, reason } => {
                let var = self.0.iter().rev().find(|(f, _)| {
                    field == *f
                        || field.starts_with(&format!("{f}."))
                        || field.starts_with(&format!("{f}["))
                        // an unknown section: the error names the section alone
                        || f.starts_with(&format!("{field}."))
                        // librdkafka's refusal names the property in its text
                        || (field == "kafka.properties"
                            && f.strip_prefix("kafka.properties.").is_some_and(|key| {
                                reason.contains(&format!("property {key}"))
                            }))
                });
                let reason = match var {
                    Some((_, var)) => format!("{reason}{SET_BY}{var})"),
                    None => reason,
                };
                BridgeError::Config { field, reason }
            }
            other => other,
        }
    }
}

fn section_table<'a>(tree: &'a mut toml::Table, section: &str) -> &'a mut toml::Table {
    let entry = tree
        .entry(section)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if !entry.is_table() {
        *entry = toml::Value::Table(toml::Table::new());
    }
    entry.as_table_mut().expect("entry was just made a table")
}
