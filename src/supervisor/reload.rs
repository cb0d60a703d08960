//! Reload without restart (SIGHUP): the configuration file is read again and only its
//! `[[pipelines]]` changes apply. Pipelines that were added start (in a group: get a slot and
//! run where the group assigns them), removed ones drain and release, changed ones restart
//! with their new settings (a changed stream goes through the fingerprint rule: refused until
//! `offsets accept-config`), unchanged ones that had stopped on a failure or were refused run
//! again, and the other unchanged ones keep running untouched.
//!
//! Invariants:
//! - A file that does not load (invalid, unreadable) is rejected with its error, and nothing
//!   changes.
//! - A change anywhere but `[[pipelines]]` (including environment overrides) is rejected with
//!   "needs a restart" naming the sections, and nothing changes.
//! - The running configuration is replaced only once the supervisor was handed the change.

use std::sync::{Arc, Mutex};

use mongodb::Client;
use tokio::sync::mpsc::UnboundedSender;
use tracing::{error, info};

use crate::config::{Config, PipelineConfig};
use crate::error::BridgeError;
use crate::kafka::admin::KafkaAdmin;
use crate::observe::health::Health;
use crate::observe::metrics::Metrics;
use crate::pipeline::PipelineContext;

/// What a reload changes, by pipeline name.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// New pipelines.
    pub added: Vec<String>,
    /// Pipelines no longer configured.
    pub removed: Vec<String>,
    /// Pipelines whose settings differ.
    pub changed: Vec<String>,
    /// Unchanged pipelines that had stopped on a failure: they run again.
    pub retried: Vec<String>,
}

impl Plan {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.retried.is_empty()
    }
}

/// What `old` → `new` changes.
///
/// Errors: the top-level sections other than `[[pipelines]]` that differ (they need a
/// restart).
pub fn plan(old: &Config, new: &Config) -> Result<Plan, String> {
    let (was, now) = (&old.settings.0, &new.settings.0);
    let mut sections: Vec<&str> = was
        .keys()
        .chain(now.keys())
        .map(String::as_str)
        .filter(|k| was.get(*k) != now.get(*k))
        .collect();
    sections.sort_unstable();
    sections.dedup();
    if !sections.is_empty() {
        return Err(format!(
            "[{}] changed, which needs a restart (a reload applies [[pipelines]] changes only); \
             the running configuration stays",
            sections.join("], [")
        ));
    }
    let find = |c: &Config, name: &str| -> Option<PipelineConfig> {
        c.pipelines.iter().find(|p| p.name == name).cloned()
    };
    let mut out = Plan::default();
    for p in &new.pipelines {
        match find(old, &p.name) {
            None => out.added.push(p.name.clone()),
            Some(before) if before != *p => out.changed.push(p.name.clone()),
            Some(_) => {}
        }
    }
    for p in &old.pipelines {
        if find(new, &p.name).is_none() {
            out.removed.push(p.name.clone());
        }
    }
    Ok(out)
}

/// A change handed to the supervisor: pipelines to stop for good, and the contexts of the
/// added and changed ones (a changed one is stopped, then started from its new context).
pub(crate) struct Reload {
    /// Pipelines to stop and forget.
    pub(crate) removed: Vec<String>,
    /// Contexts of the added and changed pipelines.
    pub(crate) contexts: Vec<PipelineContext>,
}

/// What a reload needs to build pipeline contexts like the start did.
pub struct Reloader {
    /// The running configuration.
    pub(crate) current: Mutex<Arc<Config>>,
    pub(crate) client: Client,
    pub(crate) admin: KafkaAdmin,
    pub(crate) metrics: Metrics,
    pub(crate) health: Arc<Health>,
    pub(crate) owner: String,
    pub(crate) supervisor: UnboundedSender<Reload>,
}

impl Reloader {
    /// Reads `path` and applies its `[[pipelines]]` changes; what changed.
    ///
    /// Errors: [`BridgeError::Config`] when the file does not load, when it changes more than
    /// pipelines, or when librdkafka refuses a new pipeline's producer; nothing changed then.
    pub fn reload(&self, path: &std::path::Path) -> Result<Plan, BridgeError> {
        let result = self.try_reload(path);
        let outcome = match &result {
            Ok(plan) if plan.is_empty() => {
                info!("configuration reloaded: no pipeline changed");
                "unchanged"
            }
            Ok(plan) => {
                info!(added = ?plan.added, removed = ?plan.removed, changed = ?plan.changed,
                      retried = ?plan.retried, "configuration reloaded");
                "applied"
            }
            Err(e) => {
                error!(error = %e, "configuration reload rejected");
                "rejected"
            }
        };
        self.metrics.reload(outcome);
        result
    }

    /// Applies the file at `path` on every SIGHUP until `stop` (each outcome is logged by
    /// [`Reloader::reload`]).
    pub fn on_sighup(
        self: Arc<Self>,
        path: std::path::PathBuf,
        stop: tokio_util::sync::CancellationToken,
    ) {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    got = hup.recv() => if got.is_none() { return },
                }
                info!(config = %path.display(), "SIGHUP: reloading the configuration");
                let _ = self.reload(&path);
            }
        });
    }

    fn try_reload(&self, path: &std::path::Path) -> Result<Plan, BridgeError> {
        let new = Arc::new(Config::load(path)?);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let mut plan = plan(&current, &new).map_err(|reason| BridgeError::Config {
            field: "--config".into(),
            reason,
        })?;
        plan.retried = new
            .pipelines
            .iter()
            .map(|p| &p.name)
            .filter(|n| !plan.added.contains(n) && !plan.changed.contains(n))
            .filter(|n| self.health.stopped(n))
            .cloned()
            .collect();
        if plan.is_empty() {
            return Ok(plan);
        }
        let mut contexts = Vec::new();
        for name in plan.added.iter().chain(&plan.changed).chain(&plan.retried) {
            let p = new
                .pipelines
                .iter()
                .find(|p| &p.name == name)
                .expect("a planned pipeline is in the new configuration");
            let metrics = self.metrics.pipeline(name);
            let sink =
                PipelineContext::new_sink(&new, p, &metrics, None, None).map_err(|e| match e {
                    BridgeError::Producer(e) => {
                        crate::config::kafka::refusal(&new, "producer configuration", &e)
                    }
                    other => other,
                })?;
            contexts.push(PipelineContext {
                config: Arc::clone(&new),
                pipeline: p.clone(),
                client: self.client.clone(),
                owner: self.owner.clone(),
                health: self.health.pipeline(name),
                metrics,
                admin: self.admin.clone(),
                sink,
                learned: Default::default(),
            });
        }
        for name in &plan.added {
            self.metrics.retire(name, false);
        }
        for name in &plan.removed {
            self.metrics.retire(name, true);
        }
        let reload = Reload {
            removed: plan.removed.clone(),
            contexts,
        };
        self.supervisor
            .send(reload)
            .map_err(|_| BridgeError::Config {
                field: "--config".into(),
                reason: "the bridge is stopping; the reload was not applied".into(),
            })?;
        *current = new;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str, pipelines: &str) -> Config {
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n{extra}\n\
             {pipelines}"
        );
        Config::from_toml(&text, std::iter::empty()).expect("valid test config")
    }

    const A: &str = "[[pipelines]]\nname = \"a\"\ndatabase = \"d\"\ncollection = \"a\"\n";
    const B: &str = "[[pipelines]]\nname = \"b\"\ndatabase = \"d\"\ncollection = \"b\"\n";
    const B2: &str = "[[pipelines]]\nname = \"b\"\ndatabase = \"d\"\ncollection = \"b2\"\n";
    const C: &str = "[[pipelines]]\nname = \"c\"\ndatabase = \"d\"\ncollection = \"c\"\n";

    #[test]
    fn pipelines_are_added_removed_changed_or_kept_by_name() {
        let old = config("", &format!("{A}{B}"));
        let new = config("", &format!("{B2}{C}"));
        let expected = Plan {
            added: vec!["c".into()],
            removed: vec!["a".into()],
            changed: vec!["b".into()],
            retried: Vec::new(),
        };
        assert_eq!(plan(&old, &new), Ok(expected));
        assert_eq!(
            plan(&old, &config("", &format!("{B}{A}"))),
            Ok(Plan::default())
        );
    }

    #[test]
    fn a_change_outside_the_pipelines_needs_a_restart() {
        let old = config("", A);
        let new = config(
            "[bridge]\ncommit_interval_ms = 500\n[metrics]\nlisten = \"0.0.0.0:1\"",
            A,
        );
        assert_eq!(
            plan(&old, &new),
            Err(
                "[bridge], [metrics] changed, which needs a restart (a reload applies \
                 [[pipelines]] changes only); the running configuration stays"
                    .to_owned()
            )
        );
    }
}
