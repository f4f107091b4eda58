//! The crate guide (`lib.rs`, "Where things are") against the files: every folder and source
//! file under `src/` has its line, at its depth, and every line names one that exists.

use std::collections::BTreeSet;
use std::path::Path;

/// The paths the guide names: `domain/` at depth 0, `  credits` under it (a bare name is its
/// `.rs` file), and so on by two spaces a level.
fn guide_paths(lib: &str) -> Vec<String> {
    let start = lib.find("//! ```text\n").expect("the guide's block") + "//! ```text\n".len();
    let end = start + lib[start..].find("//! ```\n").expect("the guide's end");
    let mut folders: Vec<String> = Vec::new();
    let mut paths = Vec::new();
    for line in lib[start..end].lines() {
        let line = line.strip_prefix("//! ").unwrap_or_default();
        let depth = (line.len() - line.trim_start().len()) / 2;
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        folders.truncate(depth);
        let prefix: String = folders.concat();
        if let Some(folder) = name.strip_suffix('/') {
            paths.push(format!("{prefix}{folder}/"));
            folders.push(format!("{folder}/"));
        } else if name.ends_with(".rs") {
            paths.push(format!("{prefix}{name}"));
        } else {
            paths.push(format!("{prefix}{name}.rs"));
        }
    }
    paths
}

/// Every folder (`x/`) and source file under `root`, but `lib.rs`, this file and test files.
fn source_paths(root: &Path, under: &str, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(root.join(under)).expect("a source folder") {
        let entry = entry.expect("an entry");
        let name = entry.file_name().to_string_lossy().to_string();
        if entry.path().is_dir() {
            found.insert(format!("{under}{name}/"));
            source_paths(root, &format!("{under}{name}/"), found);
        } else if name.ends_with(".rs")
            && !name.starts_with("tests")
            && !matches!(name.as_str(), "lib.rs" | "guide_check.rs")
            && (name != "mod.rs" || !under.starts_with("domain/"))
        {
            found.insert(format!("{under}{name}"));
        }
    }
}

fn differences(guide: &[String], files: &BTreeSet<String>) -> Vec<String> {
    let named: BTreeSet<String> = guide.iter().cloned().collect();
    let mut found: Vec<String> = files
        .difference(&named)
        .map(|p| format!("{p} has no line in lib.rs's guide"))
        .collect();
    found.extend(
        named
            .difference(files)
            .map(|p| format!("lib.rs's guide names {p}, which is not there")),
    );
    found
}

#[test]
fn the_guide_names_every_file_and_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(root.join("lib.rs")).expect("lib.rs");
    let mut files = BTreeSet::new();
    source_paths(&root, "", &mut files);
    let found = differences(&guide_paths(&lib), &files);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_check_sees_a_missing_line_and_a_stale_one() {
    let lib = "//! ```text\n//! ui/  pages\n//!   old.rs  gone\n//! ```\n";
    let files: BTreeSet<String> = ["ui/".to_string(), "ui/new.rs".to_string()].into();
    let found = differences(&guide_paths(lib), &files);
    assert_eq!(
        found,
        [
            "ui/new.rs has no line in lib.rs's guide",
            "lib.rs's guide names ui/old.rs, which is not there",
        ]
    );
}
