//! MIME multi-part archives as cloud-init reads them: reading the node class's `userData` into
//! parts and writing the merged archive, with upstream's boundary `//` and `\n` line ends.

use super::BootstrapError;

/// The boundary of the archives Karpenter writes.
const BOUNDARY: &str = "//";
/// A shell script part.
pub(super) const SHELL_SCRIPT: &str = r#"text/x-shellscript; charset="us-ascii""#;
/// A nodeadm `NodeConfig` part.
pub(super) const NODE_CONFIG: &str = "application/node.eks.aws";

/// Header names and values, in the order written.
type Headers = Vec<(String, String)>;

/// One part: its headers as written, and its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Part {
    pub(super) headers: Headers,
    pub(super) body: String,
}

impl Part {
    pub(super) fn new(content_type: &str, body: impl Into<String>) -> Self {
        Self {
            headers: vec![("Content-Type".to_owned(), content_type.to_owned())],
            body: body.into(),
        }
    }
}

/// Whether user data is meant as a MIME archive (upstream's test: its first header).
pub(super) fn is_archive(user_data: &str) -> bool {
    let trimmed = user_data.trim();
    trimmed.starts_with("MIME-Version:") || trimmed.starts_with("Content-Type:")
}

/// The parts of a multi-part archive, in order. Lenient where Go's reader is: a preamble before
/// the first boundary, transport padding after a boundary, a last boundary without the closing
/// `--`.
pub(super) fn parse(archive: &str) -> Result<Vec<Part>, String> {
    let (headers, body) = split_headers(archive.trim_start())?;
    let content_type = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("Content-Type"))
        .map(|(_, value)| value.as_str())
        .ok_or("it has no Content-Type header")?;
    let (media_type, params) = parse_content_type(content_type);
    if !media_type.to_ascii_lowercase().starts_with("multipart/") {
        return Err(format!("its Content-Type is {media_type}, not multipart/*"));
    }
    let boundary = params
        .iter()
        .find(|(name, _)| name == "boundary")
        .map(|(_, value)| value.as_str())
        .filter(|boundary| !boundary.is_empty())
        .ok_or("its Content-Type header has no boundary")?;
    let delimiter = format!("--{boundary}");

    let mut parts = Vec::new();
    // Where the current part's text starts, once a delimiter line has been seen.
    let mut part_start: Option<usize> = None;
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let Some(kind) = delimiter_kind(line, &delimiter) else {
            continue;
        };
        if let Some(start) = part_start {
            // The line end before a delimiter belongs to the delimiter.
            let text = body[start..line_start]
                .strip_suffix('\n')
                .map(|text| text.strip_suffix('\r').unwrap_or(text))
                .unwrap_or(&body[start..line_start]);
            parts.push(parse_part(text, parts.len() + 1)?);
        }
        match kind {
            Delimiter::Close => return Ok(parts),
            Delimiter::Part => part_start = Some(offset),
        }
    }
    match part_start {
        None => Err(format!("no line is the boundary {delimiter}")),
        Some(start) if body[start..].trim().is_empty() => Ok(parts),
        Some(_) => Err(format!(
            "part {} does not end with the boundary {delimiter}",
            parts.len() + 1
        )),
    }
}

enum Delimiter {
    Part,
    Close,
}

fn delimiter_kind(line: &str, delimiter: &str) -> Option<Delimiter> {
    let rest = line.strip_prefix(delimiter)?;
    let (rest, kind) = match rest.strip_prefix("--") {
        Some(rest) => (rest, Delimiter::Close),
        None => (rest, Delimiter::Part),
    };
    rest.trim_matches([' ', '\t', '\r', '\n'])
        .is_empty()
        .then_some(kind)
}

fn parse_part(text: &str, number: usize) -> Result<Part, String> {
    let (headers, body) =
        split_headers(text).map_err(|reason| format!("part {number}: {reason}"))?;
    Ok(Part {
        headers,
        body: body.to_owned(),
    })
}

/// Headers up to the first empty line, and what follows it.
fn split_headers(text: &str) -> Result<(Headers, &str), String> {
    let mut headers = Headers::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        offset += line.len();
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            return Ok((headers, &text[offset..]));
        }
        if line.starts_with([' ', '\t']) {
            let (_, value) = headers
                .last_mut()
                .ok_or_else(|| format!("malformed MIME header line {line:?}"))?;
            value.push(' ');
            value.push_str(line.trim());
            continue;
        }
        let (name, value) = line
            .split_once(':')
            .filter(|(name, _)| !name.is_empty() && !name.contains([' ', '\t']))
            .ok_or_else(|| format!("malformed MIME header line {line:?}"))?;
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    // Headers with nothing after them: no body.
    Ok((headers, ""))
}

/// The media type and its parameters (names lower-cased, quoted values unquoted).
fn parse_content_type(value: &str) -> (&str, Vec<(String, String)>) {
    let (media_type, mut rest) = value.split_once(';').unwrap_or((value, ""));
    let mut params = Vec::new();
    loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        let Some((name, after)) = rest.split_once('=') else {
            break;
        };
        let name = name.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, remaining) = match after.strip_prefix('"') {
            Some(quoted) => {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((index, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, escaped)) = chars.next() {
                                value.push(escaped);
                            }
                        }
                        '"' => {
                            end = index + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end..])
            }
            None => {
                let end = after.find([';', ' ', '\t']).unwrap_or(after.len());
                (after[..end].to_owned(), &after[end..])
            }
        };
        params.push((name, value));
        rest = remaining;
    }
    (media_type.trim(), params)
}

/// The archive Karpenter writes: upstream's headers, boundary `//`, no carriage returns.
pub(super) fn serialize(parts: &[Part]) -> Result<String, BootstrapError> {
    let mut archive =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for (index, part) in parts.iter().enumerate() {
        if part
            .body
            .lines()
            .any(|line| line.starts_with(&format!("--{BOUNDARY}")))
        {
            return Err(BootstrapError::BoundaryInUserData);
        }
        if index > 0 {
            archive.push('\n');
        }
        archive.push_str(&format!("--{BOUNDARY}\n"));
        for (name, value) in &part.headers {
            archive.push_str(&format!("{name}: {value}\n"));
        }
        archive.push('\n');
        archive.push_str(&part.body);
    }
    archive.push_str(&format!("\n--{BOUNDARY}--\n"));
    // Upstream drops every carriage return, the user's too, so line ends are `\n` throughout.
    Ok(archive.replace('\r', ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_parts_between_boundaries() {
        let archive = "Content-Type: multipart/mixed; boundary=\"BOUNDARY\"\nMIME-Version: 1.0\n\npreamble\n--BOUNDARY\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho one\n\n--BOUNDARY  \r\ncontent-type: text/cloud-config\nX-Extra: a\n  b\n\n#cloud-config\n--BOUNDARY--\nepilogue";
        let parts = parse(archive).unwrap();
        assert_eq!(
            parts,
            vec![
                Part::new(SHELL_SCRIPT, "#!/bin/bash\necho one\n"),
                Part {
                    headers: vec![
                        ("content-type".into(), "text/cloud-config".into()),
                        ("X-Extra".into(), "a b".into()),
                    ],
                    body: "#cloud-config".into(),
                },
            ]
        );
    }

    #[test]
    fn a_last_boundary_without_closing_dashes_ends_the_archive() {
        let archive = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=//\n\n--//\nContent-Type: text/x-shellscript\n\necho hi\n--//\n";
        let parts = parse(archive).unwrap();
        assert_eq!(parts, vec![Part::new("text/x-shellscript", "echo hi")]);
    }

    #[test]
    fn rejects_archives_that_are_not_multipart() {
        let cases = [
            ("MIME-Version: 1.0\n\n--//\n", "no Content-Type"),
            (
                "Content-Type: text/plain\n\nhello",
                "text/plain, not multipart",
            ),
            ("Content-Type: multipart/mixed\n\n--//\n", "no boundary"),
            (
                "Content-Type: multipart/mixed; boundary=\"b\"\n\nno parts here",
                "no line is the boundary --b",
            ),
            (
                "Content-Type: multipart/mixed; boundary=\"b\"\n\n--b\nContent-Type: text/plain\n\ncut short",
                "part 1 does not end",
            ),
            (
                "Content-Type: multipart/mixed; boundary=\"b\"\n\n--b\nnot a header\n\nx\n--b--",
                "part 1: malformed MIME header line \"not a header\"",
            ),
            (
                "Content-Type multipart/mixed\n\n",
                "malformed MIME header line",
            ),
        ];
        for (archive, expected) in cases {
            let error = parse(archive).unwrap_err();
            assert!(error.contains(expected), "{archive:?}: {error}");
        }
    }

    #[test]
    fn serializes_with_upstream_framing() {
        let parts = [
            Part::new(SHELL_SCRIPT, "echo one\r\n"),
            Part::new(NODE_CONFIG, "kind: NodeConfig\n"),
        ];
        assert_eq!(
            serialize(&parts).unwrap(),
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\necho one\n\n--//\nContent-Type: application/node.eks.aws\n\nkind: NodeConfig\n\n--//--\n"
        );
    }

    #[test]
    fn refuses_content_that_would_end_a_part_early() {
        let parts = [Part::new(SHELL_SCRIPT, "echo a\n--//\necho b")];
        assert!(matches!(
            serialize(&parts),
            Err(BootstrapError::BoundaryInUserData)
        ));
    }
}
