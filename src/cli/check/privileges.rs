//! Reading `connectionStatus {showPrivileges: true}`: does the user hold an action on a
//! namespace? (<https://www.mongodb.com/docs/manual/reference/resource-document/>)

use bson::{Bson, Document};

/// Whether `privileges` (the `authInfo.authenticatedUserPrivileges` array) grant `action` on
/// `db`.`coll` (`None` db: the whole deployment; `None` coll: the whole database). An empty
/// string in a privilege's resource matches any database or collection.
pub(crate) fn grants(
    privileges: &[Document],
    db: Option<&str>,
    coll: Option<&str>,
    action: &str,
) -> bool {
    privileges.iter().any(|p| {
        let actions_ok = p.get_array("actions").is_ok_and(|a| {
            a.iter()
                .any(|x| matches!(x, Bson::String(s) if s == action || s == "anyAction"))
        });
        let Ok(resource) = p.get_document("resource") else {
            return false;
        };
        if resource.get_bool("anyResource").unwrap_or(false) {
            return actions_ok;
        }
        let (Ok(rdb), Ok(rcoll)) = (resource.get_str("db"), resource.get_str("collection")) else {
            return false;
        };
        let db_ok = rdb.is_empty() || Some(rdb) == db;
        let coll_ok = rcoll.is_empty() || (Some(rcoll) == coll && db.is_some());
        actions_ok && db_ok && coll_ok
    })
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn resources_match_exactly_or_by_wildcard() {
        let privileges = vec![
            doc! { "resource": { "db": "shop", "collection": "orders" }, "actions": ["find", "changeStream"] },
            doc! { "resource": { "db": "crm", "collection": "" }, "actions": ["find"] },
            doc! { "resource": { "db": "", "collection": "" }, "actions": ["listDatabases"] },
        ];
        assert!(grants(
            &privileges,
            Some("shop"),
            Some("orders"),
            "changeStream"
        ));
        assert!(!grants(
            &privileges,
            Some("shop"),
            Some("items"),
            "changeStream"
        ));
        assert!(!grants(&privileges, Some("shop"), None, "changeStream"));
        assert!(grants(&privileges, Some("crm"), Some("people"), "find"));
        assert!(grants(&privileges, Some("crm"), None, "find"));
        assert!(!grants(&privileges, None, None, "find"));
        assert!(grants(&privileges, None, None, "listDatabases"));
        let root = vec![doc! { "resource": { "anyResource": true }, "actions": ["anyAction"] }];
        assert!(grants(&root, None, None, "changeStream"));
    }
}
