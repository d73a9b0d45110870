//! The dump's files read from disk: the edge of [`super::build`], which is pure.

use std::path::{Path, PathBuf};

use super::{DumpError, Source};

/// The extensions of the files a dump directory's listing takes.
const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Reads the dump at each path: a file, or a directory's `*.yaml`, `*.yml` and `*.json`
/// files (not its subdirectories), in name order.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Source>, DumpError> {
    let mut sources = Vec::new();
    for path in paths {
        let unreadable = |path: &Path, error: std::io::Error| DumpError::Read {
            file: path.display().to_string(),
            message: format!("cannot read: {error}"),
        };
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|error| unreadable(path, error))?
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|file| {
                    file.is_file()
                        && file
                            .extension()
                            .and_then(|e| e.to_str())
                            .is_some_and(|e| EXTENSIONS.contains(&e))
                })
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(DumpError::Read {
                    file: path.display().to_string(),
                    message: "a directory with no .yaml, .yml or .json file".to_owned(),
                });
            }
            for file in files {
                let text = std::fs::read_to_string(&file).map_err(|e| unreadable(&file, e))?;
                sources.push(Source {
                    name: file.display().to_string(),
                    text,
                });
            }
        } else {
            let text = std::fs::read_to_string(path).map_err(|e| unreadable(path, e))?;
            sources.push(Source {
                name: path.display().to_string(),
                text,
            });
        }
    }
    Ok(sources)
}
