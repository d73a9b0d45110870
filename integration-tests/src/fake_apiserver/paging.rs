//! List paging (`limit` and `continue`) with the API server's semantics: every page of one list
//! is cut from the same state, the first page's `resourceVersion`, and a `continue` token the
//! server can no longer serve consistently is `410 Expired`, after which the client lists
//! anew (kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go`,
//! `GetList`; the token is `meta.k8s.io/v1`'s, the version and the last key returned).
//!
//! etcd serves a page at an old revision from its MVCC history until compaction; this server
//! keeps instead the whole state of the last few paged lists ([`KEPT_LISTS`]), and a token
//! naming a state it no longer keeps, or one older than the watch history (after
//! [`super::FakeApiServer::compact`]), is expired, as after an etcd compaction.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::{Value, json};

/// How many lists' states are kept for their continue tokens.
pub(crate) const KEPT_LISTS: usize = 8;

/// The state a paged list is cut from: every object of one resource (all namespaces), in
/// (namespace, name) order, at `version`.
#[derive(Debug)]
pub(crate) struct KeptList {
    pub(crate) resource: usize,
    pub(crate) version: u64,
    pub(crate) items: Arc<Vec<Value>>,
}

/// The last paged lists' states, newest last.
#[derive(Debug, Default)]
pub(crate) struct KeptLists(VecDeque<KeptList>);

impl KeptLists {
    /// Keeps the state `items` of `resource` at `version` (once per resource and version),
    /// forgetting the oldest beyond [`KEPT_LISTS`].
    pub(crate) fn keep(&mut self, resource: usize, version: u64, items: &Arc<Vec<Value>>) {
        if self.find(resource, version).is_some() {
            return;
        }
        self.0.push_back(KeptList {
            resource,
            version,
            items: Arc::clone(items),
        });
        while self.0.len() > KEPT_LISTS {
            self.0.pop_front();
        }
    }

    /// The kept state of `resource` at `version`.
    pub(crate) fn find(&self, resource: usize, version: u64) -> Option<Arc<Vec<Value>>> {
        self.0
            .iter()
            .find(|kept| kept.resource == resource && kept.version == version)
            .map(|kept| Arc::clone(&kept.items))
    }

    /// Forgets every kept state (a compaction).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

/// What a `continue` token says: the list's version and the last (namespace, name) returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Continue {
    pub(crate) version: u64,
    pub(crate) after: (String, String),
}

impl Continue {
    /// The opaque token: JSON as the API server's (`v`, `rv`, `start`), hex-encoded (the API
    /// server base64-encodes it; clients only pass it back).
    pub(crate) fn encode(&self) -> String {
        let json = json!({
            "v": "meta.k8s.io/v1",
            "rv": self.version,
            "start": format!("{}/{}", self.after.0, self.after.1),
        })
        .to_string();
        json.bytes().map(|byte| format!("{byte:02x}")).collect()
    }

    /// A token this server handed out, or why not.
    pub(crate) fn decode(token: &str) -> Result<Self, String> {
        let invalid = |why: &str| format!("continue key is not valid: {why}");
        if !token.len().is_multiple_of(2) {
            return Err(invalid("odd length"));
        }
        let bytes = (0..token.len())
            .step_by(2)
            .map(|at| {
                token
                    .get(at..at + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| invalid("not hexadecimal"))?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(&e.to_string()))?;
        if value.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
            return Err(invalid("unknown version"));
        }
        let version = value
            .get("rv")
            .and_then(Value::as_u64)
            .ok_or_else(|| invalid("no resource version"))?;
        let (namespace, name) = value
            .get("start")
            .and_then(Value::as_str)
            .and_then(|start| start.split_once('/'))
            .ok_or_else(|| invalid("no start key"))?;
        Ok(Self {
            version,
            after: (namespace.to_owned(), name.to_owned()),
        })
    }
}

/// An object's (namespace, name), the order lists are in.
pub(crate) fn key_of(object: &Value) -> (&str, &str) {
    let field = |name: &str| {
        object
            .pointer(&format!("/metadata/{name}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    (field("namespace"), field("name"))
}

/// One page: up to `limit` of the `items` (in key order) after `after` that `selected`
/// accepts, and the key to continue after when any selected item is left.
pub(crate) fn page<'a>(
    items: &'a [Value],
    after: Option<(&str, &str)>,
    limit: Option<usize>,
    selected: impl Fn(&Value) -> bool,
) -> (Vec<&'a Value>, Option<(String, String)>) {
    let start = after.map_or(0, |after| {
        items.partition_point(|item| key_of(item) <= after)
    });
    let mut rest = items
        .get(start..)
        .unwrap_or_default()
        .iter()
        .filter(|item| selected(item));
    let Some(limit) = limit else {
        return (rest.collect(), None);
    };
    let page: Vec<&Value> = rest.by_ref().take(limit).collect();
    let more = rest.next().is_some();
    let next = match page.last() {
        Some(last) if more => {
            let (namespace, name) = key_of(last);
            Some((namespace.to_owned(), name.to_owned()))
        }
        _ => None,
    };
    (page, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(namespace: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": namespace, "name": name}})
    }

    fn names(page: &[&Value]) -> Vec<String> {
        page.iter()
            .map(|item| {
                let (namespace, name) = key_of(item);
                format!("{namespace}/{name}")
            })
            .collect()
    }

    #[test]
    fn given_a_limit_then_pages_cover_the_selected_items_once_in_order() {
        let items: Vec<Value> = [("a", "1"), ("a", "2"), ("b", "1"), ("b", "2"), ("c", "1")]
            .iter()
            .map(|(namespace, name)| object(namespace, name))
            .collect();
        let (first, next) = page(&items, None, Some(2), |_| true);
        assert_eq!(names(&first), ["a/1", "a/2"]);
        assert_eq!(next, Some(("a".to_owned(), "2".to_owned())));
        let after = next.as_ref().map(|(n, m)| (n.as_str(), m.as_str()));
        let (second, next) = page(&items, after, Some(2), |_| true);
        assert_eq!(names(&second), ["b/1", "b/2"]);
        let after = next.as_ref().map(|(n, m)| (n.as_str(), m.as_str()));
        let (third, next) = page(&items, after, Some(2), |_| true);
        assert_eq!((names(&third), next), (vec!["c/1".to_owned()], None));

        // A page that takes exactly what is left says there is no more.
        let (all, next) = page(&items, None, Some(5), |_| true);
        assert_eq!((all.len(), next), (5, None));
        // Without a limit, one page of everything selected.
        let selected = |item: &Value| key_of(item).0 == "b";
        let (only_b, next) = page(&items, None, None, selected);
        assert_eq!(
            (names(&only_b), next),
            (vec!["b/1".to_owned(), "b/2".to_owned()], None)
        );
        // A selector leaving nothing after the page: no continue.
        let (page_b, next) = page(&items, None, Some(2), selected);
        assert_eq!((page_b.len(), next), (2, None));
    }

    #[test]
    fn a_continue_token_reads_back_what_it_was_made_of_and_garbage_is_refused() {
        let token = Continue {
            version: 42,
            after: ("default".to_owned(), "web-1".to_owned()),
        };
        assert_eq!(Continue::decode(&token.encode()), Ok(token.clone()));
        let cluster_scoped = Continue {
            version: 7,
            after: (String::new(), "node-a".to_owned()),
        };
        assert_eq!(
            Continue::decode(&cluster_scoped.encode()),
            Ok(cluster_scoped)
        );
        for garbage in ["", "zz", "abc", "7b7d"] {
            assert!(Continue::decode(garbage).is_err(), "{garbage:?}");
        }
    }

    #[test]
    fn kept_lists_are_bounded_and_found_by_resource_and_version() {
        let mut kept = KeptLists::default();
        let items = Arc::new(vec![object("", "a")]);
        for version in 0..(KEPT_LISTS as u64 + 1) {
            kept.keep(3, version, &items);
        }
        assert!(kept.find(3, 0).is_none(), "the oldest is forgotten");
        assert!(kept.find(3, KEPT_LISTS as u64).is_some());
        assert!(kept.find(4, KEPT_LISTS as u64).is_none());
        kept.clear();
        assert!(kept.find(3, KEPT_LISTS as u64).is_none());
    }
}
