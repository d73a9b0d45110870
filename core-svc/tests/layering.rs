//! core-svc's layering rule, checked: every module imports only the modules ARCHITECTURE.md's
//! "Layers" table allows it, so imports point down and a lower layer never reaches up.
//!
//! The table lives in ARCHITECTURE.md alone (between the `layers:begin` and `layers:end`
//! markers): this test reads it from there, so the documentation and the check cannot
//! disagree. It scans each source file's `crate::` and `super::` paths outside comments and
//! outside `#[cfg(test)]` items (unit tests may use any layer's fixtures: they check what a
//! higher layer reads of a lower one), resolves each to the table's module it falls in (the
//! longest entry that prefixes it) and fails naming the file, the line and the import.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- layers:begin -->";
const END: &str = "<!-- layers:end -->";

/// A module path inside core-svc, as segments (`["cluster", "apiserver"]`).
type ModulePath = Vec<String>;

/// The table: each module and the modules it may import.
fn table() -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let architecture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md");
    let text = fs::read_to_string(&architecture).expect("ARCHITECTURE.md is readable");
    let start = text
        .find(BEGIN)
        .expect("ARCHITECTURE.md has the layers table")
        + BEGIN.len();
    let end = text[start..].find(END).expect("the layers table ends") + start;
    let mut table = BTreeMap::new();
    for row in text[start..end]
        .lines()
        .filter(|line| line.starts_with('|'))
    {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [module, allowed, ..] = cells.as_slice() else {
            panic!("a layers row has a module and what it may import: {row}");
        };
        if module.starts_with("---") || *module == "module" {
            continue;
        }
        let allowed: BTreeSet<ModulePath> = code_spans(allowed).map(|m| segments(&m)).collect();
        let module = code_spans(module)
            .next()
            .unwrap_or_else(|| panic!("a layers row names its module in backticks: {row}"));
        table.insert(segments(&module), allowed);
    }
    assert!(!table.is_empty(), "the layers table has rows");
    for (module, allowed) in &table {
        for target in allowed {
            assert!(
                table.contains_key(target),
                "the layers table lets `{}` import `{}`, which is not in the table",
                module.join("::"),
                target.join("::")
            );
        }
    }
    table
}

/// The contents of each `code` span in a table cell.
fn code_spans(cell: &str) -> impl Iterator<Item = String> + '_ {
    cell.split('`').skip(1).step_by(2).map(str::to_owned)
}

fn segments(path: &str) -> ModulePath {
    path.split("::").map(str::to_owned).collect()
}

/// The table's module `path` falls in: the longest entry prefixing it.
fn unit_of<'t>(
    table: &'t BTreeMap<ModulePath, BTreeSet<ModulePath>>,
    path: &[String],
) -> Option<&'t ModulePath> {
    table
        .keys()
        .filter(|unit| path.starts_with(unit))
        .max_by_key(|unit| unit.len())
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module a source file defines (`src/cluster/apiserver/mod.rs`: `cluster::apiserver`).
fn module_of(src: &Path, file: &Path) -> ModulePath {
    let relative = file.strip_prefix(src).expect("under src");
    let mut path: ModulePath = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// The lines of `text` outside comments and `#[cfg(test)]` items, with their numbers.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut iter = text.lines().enumerate().peekable();
    while let Some((number, line)) = iter.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            // Skip the item: one line ending in `;`, or up to its closing brace.
            let mut depth = 0i32;
            let mut opened = false;
            for (_, item) in iter.by_ref() {
                depth += item.matches('{').count() as i32 - item.matches('}').count() as i32;
                opened |= item.contains('{');
                if (!opened && item.trim_end().ends_with(';')) || (opened && depth <= 0) {
                    break;
                }
            }
            continue;
        }
        let code = line.split("//").next().unwrap_or_default();
        lines.push((number + 1, code));
    }
    lines
}

/// The module paths a line names: `crate::a::b`, and `super::a` resolved against `module`, the
/// file's own (in `a/b.rs`, module `a::b`, `super` is `a`; in `a/mod.rs`, module `a`, it is
/// the crate root). A grouped `crate::{..}` keeps its brace, for the caller to refuse.
fn imports(line: &str, module: &[String]) -> Vec<(String, ModulePath)> {
    let mut found = Vec::new();
    let mut starts: Vec<usize> = line
        .match_indices("crate::")
        .chain(line.match_indices("super::"))
        .map(|(start, _)| start)
        .collect();
    starts.sort_unstable();
    for start in starts {
        let preceded_by_path = line[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if preceded_by_path {
            continue;
        }
        let written: String = line[start..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':' || *c == '{')
            .collect();
        let mut parts = written.split("::").filter(|p| !p.is_empty()).peekable();
        let mut path: ModulePath = if parts.peek() == Some(&"crate") {
            parts.next();
            Vec::new()
        } else {
            let mut base = module.to_vec();
            while parts.peek() == Some(&"super") {
                parts.next();
                base.pop();
            }
            base
        };
        path.extend(parts.map(str::to_owned));
        found.push((written, path));
    }
    found
}

#[test]
fn imports_only_point_down_as_the_layers_table_says() {
    let table = table();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        if module.is_empty() || module == ["lib"] || module == ["main"] {
            // The crate root and the binary sit above every layer.
            continue;
        }
        let shown = file
            .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")))
            .unwrap_or(file);
        let Some(unit) = unit_of(&table, &module) else {
            violations.push(format!(
                "{}: module `{}` is not in ARCHITECTURE.md's layers table",
                shown.display(),
                module.join("::")
            ));
            continue;
        };
        let allowed = &table[unit];
        let text = fs::read_to_string(file).expect("a source file is readable");
        for (number, line) in code_lines(&text) {
            for (written, target) in imports(line, &module) {
                // A group (`super::{a, b}`) is read as its prefix; at the crate root the prefix
                // says nothing, so each module must be imported on its own.
                let grouped = target.iter().position(|segment| segment.starts_with('{'));
                let target = &target[..grouped.unwrap_or(target.len())];
                if grouped.is_some() && target.is_empty() {
                    violations.push(format!(
                        "{}:{number}: `{written}`: write one `use crate::<module>::...` per module, so this check can read it",
                        shown.display()
                    ));
                    continue;
                }
                let Some(target_unit) = unit_of(&table, target) else {
                    if target.is_empty() {
                        // `crate::` alone, or `super::` up to the crate root's own items.
                        continue;
                    }
                    violations.push(format!(
                        "{}:{number}: `{written}` names `{}`, which is not in the layers table",
                        shown.display(),
                        target.join("::")
                    ));
                    continue;
                };
                if target_unit == unit || allowed.contains(target_unit) {
                    continue;
                }
                violations.push(format!(
                    "{}:{number}: `{}` may not import `{}` (`{written}`)",
                    shown.display(),
                    unit.join("::"),
                    target_unit.join("::")
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against ARCHITECTURE.md's layers table:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_check_reads_paths_as_rust_resolves_them() {
    let module = segments("controllers::disruption::orchestration");
    let found = imports(
        "use super::Command; use crate::cluster::Snapshot; let x = super::super::drain::plan();",
        &module,
    );
    let paths: Vec<String> = found.iter().map(|(_, path)| path.join("::")).collect();
    assert_eq!(
        paths,
        [
            "controllers::disruption::Command",
            "cluster::Snapshot",
            "controllers::drain::plan",
        ]
    );
    let from_mod_rs = imports(
        "use super::nodeclaim::nodes_of;",
        &segments("controllers::disruption"),
    );
    assert_eq!(
        from_mod_rs[0].1.join("::"),
        "controllers::nodeclaim::nodes_of"
    );
    let lines = code_lines(
        "use a;\n#[cfg(test)]\nmod tests {\n    use crate::cli;\n}\n// crate::cli\nuse b;\n#[cfg(test)]\nmod testing;\nuse c;",
    );
    let kept: Vec<&str> = lines.iter().map(|(_, line)| *line).collect();
    assert_eq!(kept, ["use a;", "use b;", "use c;"]);
}
