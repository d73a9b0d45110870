//! Just enough YAML for nodeadm: writing a JSON value the way upstream's `sigs.k8s.io/yaml`
//! (go-yaml v2) does (keys sorted, sequences not indented under their key, two-space indent),
//! and telling a YAML mapping from a shell script.

use serde_json::{Map, Value};

/// The value as a block YAML document, ending with a line break.
pub(super) fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_mapping(&mut out, map, 0, false),
        Value::Array(items) if !items.is_empty() => write_sequence(&mut out, items, 0, false),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

/// `continues_line`: the first entry goes on the current line, after a `- `.
fn write_mapping(out: &mut String, map: &Map<String, Value>, indent: usize, continues_line: bool) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    for (index, (key, value)) in entries.into_iter().enumerate() {
        if index > 0 || !continues_line {
            pad(out, indent);
        }
        out.push_str(&string_text(key));
        out.push(':');
        match value {
            Value::Object(map) if !map.is_empty() => {
                out.push('\n');
                write_mapping(out, map, indent + 2, false);
            }
            Value::Array(items) if !items.is_empty() => {
                out.push('\n');
                write_sequence(out, items, indent, false);
            }
            scalar => {
                out.push(' ');
                out.push_str(&scalar_text(scalar));
                out.push('\n');
            }
        }
    }
}

fn write_sequence(out: &mut String, items: &[Value], indent: usize, continues_line: bool) {
    for (index, item) in items.iter().enumerate() {
        if index > 0 || !continues_line {
            pad(out, indent);
        }
        out.push_str("- ");
        match item {
            Value::Object(map) if !map.is_empty() => write_mapping(out, map, indent + 2, true),
            Value::Array(items) if !items.is_empty() => {
                write_sequence(out, items, indent + 2, true);
            }
            scalar => {
                out.push_str(&scalar_text(scalar));
                out.push('\n');
            }
        }
    }
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => string_text(text),
        Value::Array(_) => "[]".to_owned(),
        Value::Object(_) => "{}".to_owned(),
    }
}

/// The string plain when YAML reads it back as the same string, double-quoted otherwise.
fn string_text(text: &str) -> String {
    if is_plain_safe(text) {
        text.to_owned()
    } else {
        double_quoted(text)
    }
}

fn is_plain_safe(text: &str) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    let second = text.chars().nth(1);
    let starts_badly = match first {
        '-' | '?' | ':' => second.is_none_or(|c| c == ' '),
        ',' | '[' | ']' | '{' | '}' | '#' | '&' | '*' | '!' | '|' | '>' | '\'' | '"' | '%'
        | '@' | '`' => true,
        _ => false,
    };
    !(starts_badly
        || text.starts_with("---")
        || text.starts_with("...")
        || text.starts_with(char::is_whitespace)
        || text.ends_with(char::is_whitespace)
        || text.ends_with(':')
        || text.contains(": ")
        || text.contains(" #")
        || text.chars().any(needs_escape)
        || resolves_to_non_string(text))
}

/// Whether go-yaml v2 (which nodeadm reads its config with) would read the plain scalar as
/// something other than a string: a null, a boolean, a number or a timestamp. Errs towards
/// quoting (sexagesimal numbers, any date-like prefix).
fn resolves_to_non_string(text: &str) -> bool {
    const WORDS: [&str; 14] = [
        "~", "null", "true", "false", "yes", "no", "on", "off", "y", "n", ".inf", "+.inf", "-.inf",
        ".nan",
    ];
    if WORDS.contains(&text.to_ascii_lowercase().as_str()) || text == "<<" {
        return true;
    }
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    is_integer(unsigned) || is_float(unsigned) || is_sexagesimal(unsigned) || is_date(text)
}

fn all_digits(text: &str, radix: u32) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_digit(radix))
}

fn is_integer(unsigned: &str) -> bool {
    let digits = unsigned.replace('_', "");
    all_digits(&digits, 10)
        || [("0x", 16), ("0o", 8), ("0b", 2)]
            .iter()
            .any(|(prefix, radix)| {
                digits
                    .strip_prefix(prefix)
                    .is_some_and(|rest| all_digits(rest, *radix))
            })
}

/// go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`, sign already removed.
fn is_float(unsigned: &str) -> bool {
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(index) => (&unsigned[..index], Some(&unsigned[index + 1..])),
        None => (unsigned, None),
    };
    let mantissa_ok = match mantissa.strip_prefix('.') {
        Some(fraction) => all_digits(fraction, 10),
        None => {
            let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
            all_digits(whole, 10) && fraction.chars().all(|c| c.is_ascii_digit())
        }
    };
    let exponent_ok = exponent.is_none_or(|exponent| {
        all_digits(exponent.strip_prefix(['+', '-']).unwrap_or(exponent), 10)
    });
    mantissa_ok && exponent_ok
}

fn is_sexagesimal(unsigned: &str) -> bool {
    unsigned.contains(':')
        && unsigned.starts_with(|c: char| c.is_ascii_digit())
        && unsigned
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ':' | '.' | '_'))
}

/// `2006-1-2`, alone or starting a timestamp.
fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 6
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[5].is_ascii_digit()
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}')
}

fn double_quoted(text: &str) -> String {
    super::double_quoted_with(text, |c| match c {
        '\n' => Some("\\n".into()),
        '\t' => Some("\\t".into()),
        '\r' => Some("\\r".into()),
        c if needs_escape(c) => Some(format!("\\u{:04X}", u32::from(c))),
        _ => None,
    })
}

/// Whether the text reads as a YAML mapping, the test upstream uses to tell a `NodeConfig` in
/// `userData` from a shell script (it tries to unmarshal a map). Checked line by line rather
/// than parsed: every line at the document's outer indentation must be a `key:` line.
pub(super) fn is_mapping(text: &str) -> bool {
    let mut base_indent: Option<usize> = None;
    let mut saw_key = false;
    let mut value_open = false;
    for line in text.lines() {
        let content = line.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start_matches(' ').len();
        if line[indent..].starts_with('\t') {
            // Tabs cannot indent YAML; a shell script indents with them freely.
            return false;
        }
        let base = *base_indent.get_or_insert(indent);
        if indent > base {
            if !saw_key {
                return false;
            }
            continue;
        }
        if indent < base {
            return false;
        }
        let line = line.trim();
        if line == "---" || line == "..." || line.starts_with("--- ") || line.starts_with('%') {
            continue;
        }
        // A sequence may sit at its key's own indentation.
        if (line == "-" || line.starts_with("- ")) && value_open {
            continue;
        }
        match key_line(line) {
            Some(empty_value) => value_open = empty_value,
            None => return false,
        }
        saw_key = true;
    }
    saw_key
}

/// Whether the line is `key: value`, `key:`, `"quoted key": value` or `? complex key`, and if
/// so whether its value is still to come on the next lines.
fn key_line(line: &str) -> Option<bool> {
    if line.starts_with("? ") {
        return Some(false);
    }
    let rest = match line.chars().next() {
        Some(quote @ ('"' | '\'')) => match closing_quote(&line[1..], quote) {
            Some(end) => line[1 + end + 1..].trim_start(),
            None => return None,
        },
        Some(first) => {
            let second = line.chars().nth(1);
            let starts_badly = match first {
                '-' | '?' | ':' => second.is_none_or(|c| c == ' '),
                ',' | '[' | ']' | '{' | '}' | '#' | '&' | '*' | '!' | '|' | '>' | '%' | '@'
                | '`' => true,
                _ => false,
            };
            if starts_badly {
                return None;
            }
            let colon = key_end(line)?;
            if line[..colon].contains(" #") {
                return None;
            }
            &line[colon..]
        }
        None => return None,
    };
    let value = rest.strip_prefix(':')?;
    if !(value.is_empty() || value.starts_with([' ', '\t'])) {
        return None;
    }
    let value = value.trim();
    let value = value.split(" #").next().unwrap_or_default().trim_end();
    if value.is_empty() || value.starts_with('#') {
        return Some(true);
    }
    // A plain value cannot hold another mapping indicator on the same line.
    let valid = value.starts_with(['"', '\'', '[', '{', '|', '>', '&', '*', '!'])
        || !(value.contains(": ") || value.ends_with(':'));
    valid.then_some(false)
}

/// Where the `:` ending a plain key is: the first one followed by a space or the line's end.
fn key_end(line: &str) -> Option<usize> {
    line.char_indices().find_map(|(index, c)| {
        (c == ':'
            && line[index + 1..]
                .chars()
                .next()
                .is_none_or(|next| next == ' ' || next == '\t'))
        .then_some(index)
    })
}

fn closing_quote(text: &str, quote: char) -> Option<usize> {
    let mut chars = text.char_indices().peekable();
    while let Some((index, c)) = chars.next() {
        if quote == '"' && c == '\\' {
            chars.next();
        } else if c == quote {
            // In single quotes, '' is an escaped quote.
            if quote == '\'' && chars.peek().is_some_and(|(_, next)| *next == '\'') {
                chars.next();
                continue;
            }
            return Some(index);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn writes_like_go_yaml_v2() {
        let value = json!({
            "spec": {
                "kubelet": {
                    "flags": ["--node-labels=\"a=b,c=d\""],
                    "config": {
                        "maxPods": 110,
                        "clusterDNS": ["10.0.100.10"],
                        "registerWithTaints": [{"key": "k", "effect": "NoExecute"}],
                        "nested": [["a", "b"], []],
                    },
                },
                "containerd": {},
            },
            "apiVersion": "node.eks.aws/v1alpha1",
            "metadata": {},
        });
        assert_eq!(
            to_string(&value),
            "apiVersion: node.eks.aws/v1alpha1
metadata: {}
spec:
  containerd: {}
  kubelet:
    config:
      clusterDNS:
      - 10.0.100.10
      maxPods: 110
      nested:
      - - a
        - b
      - []
      registerWithTaints:
      - effect: NoExecute
        key: k
    flags:
    - --node-labels=\"a=b,c=d\"
"
        );
    }

    #[test]
    fn quotes_strings_yaml_would_read_as_something_else() {
        let plain = [
            "5%",
            "100m",
            "1Gi",
            "10.0.100.10",
            "10.100.0.0/16",
            "https://test-cluster",
            "Y2EtYnVuZGxlCg==",
            "fd00::a",
            "--node-labels=\"a=b\"",
            "memory.available",
        ];
        for text in plain {
            assert_eq!(string_text(text), text);
        }
        let quoted = [
            ("", r#""""#),
            ("true", r#""true""#),
            ("No", r#""No""#),
            ("110", r#""110""#),
            ("1.5", r#""1.5""#),
            ("0x1F", r#""0x1F""#),
            ("1_000", r#""1_000""#),
            ("-.5e3", r#""-.5e3""#),
            ("1:20", r#""1:20""#),
            ("2024-01-02T10:00:00Z", r#""2024-01-02T10:00:00Z""#),
            ("2024-01-02", r#""2024-01-02""#),
            ("-", r#""-""#),
            ("- a", r#""- a""#),
            ("a: b", r#""a: b""#),
            ("a #b", r#""a #b""#),
            ("#a", r##""#a""##),
            ("*ref", r#""*ref""#),
            (" x", r#"" x""#),
            ("line\nbreak \"q\" \\", r#""line\nbreak \"q\" \\""#),
            ("bell\u{7}", r#""bell\u0007""#),
        ];
        for (text, expected) in quoted {
            assert_eq!(string_text(text), expected, "{text:?}");
        }
    }

    #[test]
    fn tells_a_node_config_from_a_shell_script() {
        let mappings = [
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 42\n",
            "# comment\n---\napiVersion: v1\n\n\"quoted: key\": 1\n'it''s': x\n",
            "  indented: mapping\n  other: value\n",
            "key:\n- item\n- other\nnext: 1\n",
        ];
        for text in mappings {
            assert!(is_mapping(text), "{text:?}");
        }
        let scripts = [
            "#!/bin/bash\necho \"Hello, AL2023!\"\n",
            "#!/bin/bash\n# only comments\n",
            "",
            "export A=b\nkey: value\n",
            "key: value\necho hi\n",
            "key: a: b\n",
            "- a\n- b\n",
            "key: value\n- item\n",
            "if true; then\n\techo: x\nfi\n",
            "{ echo hi; }\n",
            "http://example.com\n",
        ];
        for text in scripts {
            assert!(!is_mapping(text), "{text:?}");
        }
    }
}
