//! Bottlerocket: the node class's TOML settings with Karpenter's `settings.kubernetes` merged
//! in (upstream `bottlerocket.go`). Karpenter's values win: the cluster it joins, its labels
//! over the user's, its taints instead of the user's (the scheduler only knows those), its
//! kubelet settings where the node class sets them. The result is written again as TOML with
//! keys sorted, so equal settings give equal bytes.

use std::collections::BTreeMap;

use toml_edit::{DocumentMut, InlineTable, Item, Table, Value};

use super::{Bootstrap, BootstrapError, double_quoted_with, taint_value};

/// A TOML table: values and sub-tables, by key.
type Tree = BTreeMap<String, Node>;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Table(Tree),
    ArrayOfTables(Vec<Tree>),
    Value(Scalar),
}

/// A TOML value that is written inline.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    /// As TOML writes it.
    Datetime(String),
    Array(Vec<Scalar>),
    InlineTable(BTreeMap<String, Scalar>),
}

pub(super) fn settings(input: &Bootstrap<'_>) -> Result<String, BootstrapError> {
    let mut root = match input.custom_user_data() {
        Some(user_data) => {
            let document: DocumentMut = user_data.parse().map_err(|error| invalid(&error))?;
            table_tree(document.as_table())
        }
        None => Tree::new(),
    };
    let settings = table_at(&mut root, "settings", "settings")?;
    let kubernetes = table_at(settings, "kubernetes", "settings.kubernetes")?;
    merge_kubernetes(kubernetes, input)?;
    Ok(render(&root))
}

fn invalid(reason: &dyn std::fmt::Display) -> BootstrapError {
    BootstrapError::InvalidToml {
        reason: reason.to_string().trim_end().to_owned(),
    }
}

fn merge_kubernetes(kubernetes: &mut Tree, input: &Bootstrap<'_>) -> Result<(), BootstrapError> {
    let string = |text: &str| Node::Value(Scalar::String(text.to_owned()));
    let string_table = |map: &BTreeMap<String, String>| {
        Node::Table(
            map.iter()
                .map(|(key, value)| (key.clone(), string(value)))
                .collect(),
        )
    };

    kubernetes.insert("cluster-name".into(), string(&input.cluster.name));
    kubernetes.insert("api-server".into(), string(&input.cluster.endpoint));
    if let Some(ca) = input.ca_bundle() {
        kubernetes.insert("cluster-certificate".into(), string(ca));
    }

    let labels = table_at(kubernetes, "node-labels", "settings.kubernetes.node-labels")?;
    for (key, value) in input.labels {
        labels.insert(key.clone(), string(value));
    }
    if labels.is_empty() {
        kubernetes.remove("node-labels");
    }

    if let Some(max_pods) = input.max_pods() {
        kubernetes.insert("max-pods".into(), Node::Value(Scalar::Integer(max_pods)));
    }
    if let Some(kubelet) = input.kubelet {
        match kubelet.cluster_dns.as_slice() {
            [] => {}
            [ip] => {
                kubernetes.insert("cluster-dns-ip".into(), string(ip));
            }
            ips => {
                let ips = ips.iter().map(|ip| Scalar::String(ip.clone())).collect();
                kubernetes.insert("cluster-dns-ip".into(), Node::Value(Scalar::Array(ips)));
            }
        }
        let maps = [
            ("system-reserved", &kubelet.system_reserved),
            ("kube-reserved", &kubelet.kube_reserved),
            ("eviction-hard", &kubelet.eviction_hard),
        ];
        for (key, map) in maps {
            if !map.is_empty() {
                kubernetes.insert(key.into(), string_table(map));
            }
        }
        // Bottlerocket takes these percentages as strings.
        let percentages = [
            (
                "image-gc-high-threshold-percent",
                kubelet.image_gc_high_threshold_percent,
            ),
            (
                "image-gc-low-threshold-percent",
                kubelet.image_gc_low_threshold_percent,
            ),
        ];
        for (key, percent) in percentages {
            if let Some(percent) = percent {
                kubernetes.insert(key.into(), string(&percent.to_string()));
            }
        }
        if let Some(enforced) = kubelet.cpu_cfs_quota {
            kubernetes.insert(
                "cpu-cfs-quota-enforced".into(),
                Node::Value(Scalar::Boolean(enforced)),
            );
        }
    }

    let mut taints: BTreeMap<String, Vec<Scalar>> = BTreeMap::new();
    for taint in input.sorted_taints() {
        taints
            .entry(taint.key.clone())
            .or_default()
            .push(Scalar::String(format!(
                "{}:{}",
                taint_value(taint),
                taint.effect
            )));
    }
    kubernetes.remove("node-taints");
    if !taints.is_empty() {
        let taints = taints
            .into_iter()
            .map(|(key, values)| (key, Node::Value(Scalar::Array(values))))
            .collect();
        kubernetes.insert("node-taints".into(), Node::Table(taints));
    }
    Ok(())
}

/// The table under `key`, created if missing.
fn table_at<'t>(tree: &'t mut Tree, key: &str, path: &str) -> Result<&'t mut Tree, BootstrapError> {
    match tree
        .entry(key.to_owned())
        .or_insert_with(|| Node::Table(Tree::new()))
    {
        Node::Table(table) => Ok(table),
        _ => Err(invalid(&format!("`{path}` must be a table"))),
    }
}

fn table_tree(table: &Table) -> Tree {
    table
        .iter()
        .filter_map(|(key, item)| item_node(item).map(|node| (key.to_owned(), node)))
        .collect()
}

fn item_node(item: &Item) -> Option<Node> {
    match item {
        Item::None => None,
        // Inline tables are tables like any other, so Karpenter's keys merge into them.
        Item::Value(Value::InlineTable(table)) => Some(Node::Table(inline_tree(table))),
        Item::Value(value) => Some(Node::Value(scalar(value))),
        Item::Table(table) => Some(Node::Table(table_tree(table))),
        Item::ArrayOfTables(tables) => {
            Some(Node::ArrayOfTables(tables.iter().map(table_tree).collect()))
        }
    }
}

fn inline_tree(table: &InlineTable) -> Tree {
    table
        .iter()
        .map(|(key, value)| {
            let node = match value {
                Value::InlineTable(table) => Node::Table(inline_tree(table)),
                value => Node::Value(scalar(value)),
            };
            (key.to_owned(), node)
        })
        .collect()
}

fn scalar(value: &Value) -> Scalar {
    match value {
        Value::String(text) => Scalar::String(text.value().clone()),
        Value::Integer(number) => Scalar::Integer(*number.value()),
        Value::Float(number) => Scalar::Float(*number.value()),
        Value::Boolean(flag) => Scalar::Boolean(*flag.value()),
        Value::Datetime(datetime) => Scalar::Datetime(datetime.value().to_string()),
        Value::Array(items) => Scalar::Array(items.iter().map(scalar).collect()),
        Value::InlineTable(table) => Scalar::InlineTable(
            table
                .iter()
                .map(|(key, value)| (key.to_owned(), scalar(value)))
                .collect(),
        ),
    }
}

/// TOML in upstream's (go-toml v2) layout: a header for every table, literal strings where
/// they can be, a blank line between a table's values and the next header.
fn render(root: &Tree) -> String {
    let mut writer = Writer::default();
    writer.table(&mut Vec::new(), root, None);
    writer.out
}

#[derive(Default)]
struct Writer {
    out: String,
    after_header: bool,
}

impl Writer {
    fn table(&mut self, path: &mut Vec<String>, tree: &Tree, header: Option<(&str, &str)>) {
        if let Some((open, close)) = header {
            if !self.out.is_empty() && !self.after_header {
                self.out.push('\n');
            }
            self.out
                .push_str(&format!("{open}{}{close}\n", path.join(".")));
            self.after_header = true;
        }
        for (key, node) in tree {
            if let Node::Value(value) = node {
                self.out
                    .push_str(&format!("{} = {}\n", toml_key(key), toml_value(value)));
                self.after_header = false;
            }
        }
        for (key, node) in tree {
            match node {
                Node::Value(_) => continue,
                Node::Table(table) => {
                    path.push(toml_key(key));
                    self.table(path, table, Some(("[", "]")));
                    path.pop();
                }
                Node::ArrayOfTables(tables) => {
                    path.push(toml_key(key));
                    for table in tables {
                        self.table(path, table, Some(("[[", "]]")));
                    }
                    path.pop();
                }
            }
        }
    }
}

fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if bare {
        key.to_owned()
    } else {
        toml_string(key)
    }
}

fn toml_value(value: &Scalar) -> String {
    match value {
        Scalar::String(text) => toml_string(text),
        Scalar::Integer(number) => number.to_string(),
        Scalar::Float(number) if number.is_nan() => "nan".to_owned(),
        Scalar::Float(number) if number.is_infinite() => if number.is_sign_positive() {
            "inf"
        } else {
            "-inf"
        }
        .to_owned(),
        // Debug keeps a fraction or exponent, so the number stays a float.
        Scalar::Float(number) => format!("{number:?}"),
        Scalar::Boolean(flag) => flag.to_string(),
        Scalar::Datetime(datetime) => datetime.clone(),
        Scalar::Array(items) => format!(
            "[{}]",
            items.iter().map(toml_value).collect::<Vec<_>>().join(", ")
        ),
        Scalar::InlineTable(table) if table.is_empty() => "{}".to_owned(),
        Scalar::InlineTable(table) => format!(
            "{{ {} }}",
            table
                .iter()
                .map(|(key, value)| format!("{} = {}", toml_key(key), toml_value(value)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A literal `'...'` string when nothing in it needs escaping, else a basic `"..."` one.
fn toml_string(text: &str) -> String {
    let literal_ok = !text.contains('\'') && !text.chars().any(|c| c.is_control() && c != '\t');
    if literal_ok {
        return format!("'{text}'");
    }
    double_quoted_with(text, |c| match c {
        '\u{8}' => Some("\\b".into()),
        '\t' => Some("\\t".into()),
        '\n' => Some("\\n".into()),
        '\u{c}' => Some("\\f".into()),
        '\r' => Some("\\r".into()),
        c if c.is_control() => Some(format!("\\u{:04X}", u32::from(c))),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        let document: DocumentMut = text.parse().unwrap();
        render(&table_tree(document.as_table()))
    }

    #[test]
    fn writes_what_it_reads() {
        let text = r#"top = 1.5
when = 1979-05-27T07:32:00Z

[a]
"key with spaces" = "it's"
control = "tab\there\u0001"
list = [1, [2, 3], { x = 'y' }]
empty = {}
big = 1e300

[[a.servers]]
name = 'one'

[[a.servers]]
name = 'two'

[a.servers.detail]
deep = true

[b]
"#;
        let rendered = round_trip(text);
        assert_eq!(
            rendered,
            r#"top = 1.5
when = 1979-05-27T07:32:00Z

[a]
big = 1e300
control = "tab\there\u0001"
'key with spaces' = "it's"
list = [1, [2, 3], { x = 'y' }]

[a.empty]
[[a.servers]]
name = 'one'

[[a.servers]]
name = 'two'

[a.servers.detail]
deep = true

[b]
"#
        );
        // Written again, the same settings.
        assert_eq!(round_trip(&rendered), rendered);
    }

    #[test]
    fn floats_stay_floats() {
        let cases = [
            (1.0, "1.0"),
            (-0.5, "-0.5"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "nan"),
        ];
        for (number, expected) in cases {
            assert_eq!(toml_value(&Scalar::Float(number)), expected);
        }
    }
}
