//! `offsets accept-cluster NAME [--force]`: the explicit way to say that a pipeline's position
//! moved to another MongoDB cluster on purpose (a cluster restored whole from a file-system
//! snapshot under a new identity, a replica set made a shard and reached through mongos). It
//! records the cluster `mongodb.uri` reaches, as the server names it
//! (`crate::mongo::cluster`), and keeps the position.
//!
//! Why a command and not a configuration key: a key would stay in the file and accept every
//! later move without a word (the very mistake the check exists for), and it would be read by
//! every replica; the command records one cluster, once, for one pipeline, printing the
//! document before and after, like `accept-config`.
//!
//! Invariants: guarded against a live owner (unless `--force`) and fencing it
//! (`change.rs`'s `before_change`, the epoch read); a cluster the server does not name is never
//! recorded (nothing is written, and the refusal says what to grant).

use std::io::Write;

use super::{Command, failed};
use crate::error::BridgeError;
use crate::mongo::cluster::{self as server, ClusterRead};
use crate::offsets::cluster::{Check, check};

impl Command<'_> {
    /// Records the cluster the configuration reaches as pipeline `name`'s, keeping its position.
    pub(super) async fn accept_cluster(
        &self,
        name: &str,
        force: bool,
        out: &mut impl Write,
    ) -> Result<bool, BridgeError> {
        let Some((_, parsed)) = self.before_change(name, force, false, out).await? else {
            return Ok(false);
        };
        let Some(parsed) = parsed else {
            let _ = writeln!(out, "{}", self.missing(name));
            return Ok(false);
        };
        let found = server::read(&self.client)
            .await
            .map_err(|failure| failure.into_error(name))?;
        let identity = match (&found, check(parsed.cluster.as_ref(), &found)) {
            (ClusterRead::Unknown(reason), _) => {
                let _ = writeln!(
                    out,
                    "refused: the server does not name its cluster ({reason}); nothing is \
                     recorded, and the bridge runs this pipeline without the check"
                );
                return Ok(false);
            }
            (_, Check::Same) => {
                let _ = writeln!(out, "nothing to accept: the document records this cluster");
                return Ok(true);
            }
            (ClusterRead::Known(identity), _) => identity,
        };
        let was = parsed
            .cluster
            .as_ref()
            .map_or_else(|| "none".to_owned(), ToString::to_string);
        let _ = writeln!(out, "recording cluster {identity} (was: {was})");
        let done = self
            .offsets
            .accept_cluster(
                name,
                parsed.epoch,
                identity,
                &Self::operator("offsets accept-cluster"),
            )
            .await
            .map_err(|e| failed(name, e))?;
        self.after_change(name, done, out).await
    }
}
