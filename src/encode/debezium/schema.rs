//! The JSON converter's schemas-enabled form (`schemas.enable = true`, Kafka Connect's
//! default): `{"schema":…,"payload":…}`, the payload being the schemas-off bytes. The schemas
//! are Debezium 3.6.3's, as its records carry them; only their names vary: `<topic.prefix>.
//! <db>.<coll>.Key` and `….Envelope` (Debezium's own topic name, also when the pipeline routes
//! the records to another `topic`; `schema.name.adjustment.mode = none`, its default).

use crate::extjson::debezium::write_jackson_string;

/// The key schema, up to its name.
const KEY_HEAD: &str = concat!(
    r#"{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],"#,
    r#""optional":false,"name":"#,
);
/// The value schema, up to its name.
const ENVELOPE_HEAD: &str = concat!(
    r#"{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"#,
    r#""name":"io.debezium.data.Json","version":1,"field":"before"},"#,
    r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"#,
    r#""field":"after"},"#,
    r#"{"type":"struct","fields":[{"type":"array","items":{"type":"string","optional":false},"#,
    r#""optional":true,"field":"removedFields"},"#,
    r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"#,
    r#""field":"updatedFields"},"#,
    r#"{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":false,"#,
    r#""field":"field"},"#,
    r#"{"type":"int32","optional":false,"field":"size"}],"optional":false,"#,
    r#""name":"io.debezium.connector.mongodb.changestream.truncatedarray","version":1},"#,
    r#""optional":true,"field":"truncatedArrays"}],"optional":true,"#,
    r#""name":"io.debezium.connector.mongodb.changestream.updatedescription","version":1,"#,
    r#""field":"updateDescription"},"#,
    r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},"#,
    r#"{"type":"string","optional":false,"field":"connector"},"#,
    r#"{"type":"string","optional":false,"field":"name"},"#,
    r#"{"type":"int64","optional":false,"field":"ts_ms"},"#,
    r#"{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"#,
    r#""parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,"#,
    r#"last,false,incremental"},"default":"false","field":"snapshot"},"#,
    r#"{"type":"string","optional":false,"field":"db"},"#,
    r#"{"type":"string","optional":true,"field":"sequence"},"#,
    r#"{"type":"int64","optional":true,"field":"ts_us"},"#,
    r#"{"type":"int64","optional":true,"field":"ts_ns"},"#,
    r#"{"type":"string","optional":false,"field":"collection"},"#,
    r#"{"type":"int32","optional":false,"field":"ord"},"#,
    r#"{"type":"string","optional":true,"field":"lsid"},"#,
    r#"{"type":"int64","optional":true,"field":"txnNumber"},"#,
    r#"{"type":"int64","optional":true,"field":"wallTime"}],"optional":false,"#,
    r#""name":"io.debezium.connector.mongo.Source","version":1,"field":"source"},"#,
    r#"{"type":"string","optional":true,"field":"op"},"#,
    r#"{"type":"int64","optional":true,"field":"ts_ms"},"#,
    r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},"#,
    r#"{"type":"int64","optional":false,"field":"total_order"},"#,
    r#"{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"#,
    r#""name":"event.block","version":1,"field":"transaction"}],"optional":false,"name":"#,
);

/// The key record of schemas-off key JSON `key`, for Debezium topic name `name`.
pub(super) fn key(name: &str, key: &str) -> String {
    wrap(KEY_HEAD, &format!("{name}.Key"), key)
}

/// The value record of schemas-off value JSON `value`, for Debezium topic name `name`.
pub(super) fn envelope(name: &str, value: &str) -> String {
    wrap(ENVELOPE_HEAD, &format!("{name}.Envelope"), value)
}

/// `head`, the schema's quoted `name`, the rest of the schema, then the payload.
fn wrap(head: &str, name: &str, payload: &str) -> String {
    let mut out = String::with_capacity(head.len() + name.len() + payload.len() + 16);
    out.push_str(head);
    write_jackson_string(&mut out, name);
    out.push_str("},\"payload\":");
    out.push_str(payload);
    out.push('}');
    out
}
