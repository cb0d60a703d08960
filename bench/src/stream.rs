//! The change stream of the benchmark collection as the limit programs read it: its start
//! position saved to a file (`bench token`, before the backlog is written) and the stream
//! opened again after that position, as raw events.

use std::path::Path;

use bson::{Document, RawDocumentBuf};
use mongo_kafka_bridge::source::{RawStream, current_token, to_resume_token};
use serde_json::json;

use crate::Servers;

/// Opens the change stream of the collection after the saved token.
pub(crate) async fn open(
    servers: &Servers,
    token: &Path,
    split_stage: bool,
) -> anyhow::Result<RawStream> {
    let token = RawDocumentBuf::from_bytes(std::fs::read(token)?)?;
    let client = crate::mongo(&servers.uri).await?;
    let coll = client
        .database(&servers.db)
        .collection::<Document>(&servers.coll);
    let stages = if split_stage {
        vec![bson::doc! { mongo_kafka_bridge::source::split::SPLIT_STAGE: {} }]
    } else {
        Vec::new()
    };
    let stream = coll
        .watch()
        .pipeline(stages)
        .start_after(to_resume_token(&token)?)
        .await?;
    Ok(stream.with_type::<RawDocumentBuf>())
}

/// `bench token`: the stream's resume token right after opening (what the bridge commits first).
pub async fn save_token(servers: &Servers, out: &Path) -> anyhow::Result<String> {
    let client = crate::mongo(&servers.uri).await?;
    let coll = client
        .database(&servers.db)
        .collection::<Document>(&servers.coll);
    let mut stream = coll.watch().await?.with_type::<RawDocumentBuf>();
    let mut token = current_token(&stream)?;
    while token.is_none() {
        if stream.next_if_any().await?.is_some() {
            anyhow::bail!("the collection is being written to; save the token before the load");
        }
        token = current_token(&stream)?;
    }
    let token = token.ok_or_else(|| anyhow::anyhow!("no resume token"))?;
    std::fs::write(out, token.as_bytes())?;
    Ok(json!({ "token_bytes": token.as_bytes().len() }).to_string())
}
