//! The folder order of both crates, checked on every test run: each folder imports only the
//! folders its row names (ARCHITECTURE.md, "Crates and folders"), so no import cycle can form
//! between folders. Read from the sources' `crate::<folder>` paths, leaving out comments and
//! `#[cfg(test)]` modules. Beside the table, gates on size, each with a list that may only
//! shrink: no source file past 800 lines of code, no function past 150 lines.

mod scan;

use scan::functions;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The server crate: folder (or top-level file) → the folders it may import.
const SERVER: &[(&str, &[&str])] = &[
    ("util", &[]),
    ("config", &["util"]),
    ("net", &["util"]),
    ("store", &["util"]),
    ("runtime", &["config", "net", "util"]),
    ("identity", &["config", "net", "store", "util"]),
    ("registry", &["config", "net", "util"]),
    (
        "service",
        &[
            "config", "identity", "net", "registry", "runtime", "store", "util",
        ],
    ),
    (
        "http",
        &[
            "config", "identity", "net", "runtime", "service", "store", "util",
        ],
    ),
    (
        "reclaim",
        &["config", "runtime", "service", "store", "util"],
    ),
    (
        "boot",
        &[
            "config", "http", "identity", "net", "registry", "runtime", "service", "store", "util",
        ],
    ),
    (
        "cli",
        &[
            "boot", "config", "http", "identity", "net", "registry", "runtime", "service", "store",
            "util",
        ],
    ),
];

/// The app crate.
const APP: &[(&str, &[&str])] = &[
    ("domain", &[]),
    ("error", &["domain"]),
    ("model", &["domain", "error"]),
    ("api", &["domain", "error", "model"]),
    ("ui", &["api", "domain", "error", "model"]),
];

/// Crates the pure domain never names: it compiles for the browser and is tested alone.
const NOT_IN_DOMAIN: &[&str] = &["leptos", "axum", "sqlx", "kube", "tokio", "web_sys"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` that are code: no comments, no `#[cfg(test)]` item (it ends at the
/// closing brace, or the `;`, at the attribute's own indentation).
fn code_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut skipping: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if let Some(item_indent) = &skipping {
            let ends = indent == item_indent
                && (trimmed == "}" || (trimmed.ends_with(';') && !trimmed.starts_with('#')));
            if ends {
                skipping = None;
            }
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            skipping = Some(indent.to_string());
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        lines.push(line.split(" //").next().unwrap_or(line));
    }
    lines
}

/// Every `crate::<name>` a line names.
fn crate_paths(line: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        // `crate::{a, b::c}` names `a` and `b` (one line's worth of the group).
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or(group);
            for part in group.split(',') {
                let name = part.trim().split("::").next().unwrap_or("");
                if !name.is_empty() {
                    found.push(name);
                }
            }
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        found.push(&rest[..end]);
    }
    found
}

/// The folder a source file belongs to: its first component under `src`, or its stem.
fn folder_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative.components().next().expect("a component");
    let first = first.as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Imports that break the table: "folder/file.rs imports `crate::x`".
fn violations(src: &Path, table: &[(&str, &[&str])], roots: &[&str]) -> Vec<String> {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = table
        .iter()
        .map(|(folder, may)| (*folder, may.iter().copied().collect()))
        .collect();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let folder = folder_of(src, &file);
        if roots.contains(&folder.as_str()) {
            continue;
        }
        let Some(may) = allowed.get(folder.as_str()) else {
            found.push(format!(
                "{}: the folder `{folder}` has no row in the layout table",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("a source file");
        for line in code_lines(&text) {
            for target in crate_paths(line) {
                if target != folder && allowed.contains_key(target) && !may.contains(target) {
                    found.push(format!(
                        "{} imports `crate::{target}`",
                        file.strip_prefix(src).unwrap_or(&file).display()
                    ));
                }
            }
        }
    }
    found.dedup();
    found
}

fn sources(crate_dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src")
}

#[test]
fn server_folders_import_only_those_before_them() {
    let found = violations(&sources("server"), SERVER, &["lib", "main", "layout_check"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn app_folders_import_only_those_before_them() {
    let found = violations(&sources("app"), APP, &["lib", "guide_check"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_domain_names_no_framework() {
    let mut files = Vec::new();
    rust_files(&sources("app").join("domain"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for line in code_lines(&text) {
            for name in NOT_IN_DOMAIN {
                if line.contains(&format!("{name}::")) {
                    found.push(format!("{} names {name}", file.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_check_sees_a_forbidden_import() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("store")).unwrap();
    std::fs::write(
        dir.path().join("store/mod.rs"),
        "use crate::util::now_ms;\n// crate::service is only a comment\nuse crate::service::Service;\nuse crate::{util, http::App};\n#[cfg(test)]\nmod tests {\n    use crate::http::App;\n}\n",
    )
    .unwrap();
    let found = violations(dir.path(), SERVER, &[]);
    assert_eq!(
        found,
        [
            "store/mod.rs imports `crate::service`",
            "store/mod.rs imports `crate::http`"
        ]
    );
}

/// Files past 800 lines of code (comments and tests left out), each with the most it may have:
/// one concern per file, so this list may only shrink. Split a file rather than raise its line.
const LONG_FILES: &[(&str, usize)] = &[];

/// How long a source file may grow before it must be split.
const MOST_LINES: usize = 800;

/// Each source file's lines of code, test files (`tests*.rs`) left out.
fn code_sizes(crate_dir: &str) -> Vec<(String, usize)> {
    let src = sources(crate_dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|f| {
            !f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("tests"))
        })
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a source file");
            let name = format!(
                "{crate_dir}/src/{}",
                file.strip_prefix(&src).unwrap_or(&file).display()
            );
            (name, code_lines(&text).len())
        })
        .collect()
}

#[test]
fn no_source_file_grows_past_800_lines_of_code() {
    let listed: BTreeMap<&str, usize> = LONG_FILES.iter().copied().collect();
    let mut found = Vec::new();
    for (name, lines) in code_sizes("server").into_iter().chain(code_sizes("app")) {
        match listed.get(name.as_str()) {
            Some(&most) if lines > most => found.push(format!(
                "{name}: {lines} lines of code, past its {most}: split it"
            )),
            Some(_) if lines <= MOST_LINES => found.push(format!(
                "{name}: {lines} lines of code: take it off LONG_FILES"
            )),
            None if lines > MOST_LINES => found.push(format!(
                "{name}: {lines} lines of code, past {MOST_LINES}: split it"
            )),
            _ => {}
        }
    }
    for name in listed.keys() {
        let exists = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(name)
            .exists();
        if !exists {
            found.push(format!("{name}: gone; take it off LONG_FILES"));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// Functions past 150 lines (from `fn` to its closing brace) outside tests: file, name
/// (`Type::name` in an impl or a trait), its exact length, and why it is still long. One
/// concern per function, so this list may only shrink: split a function into named phases
/// rather than change its line, and lower or remove the line when it shrinks.
const LONG_FUNCTIONS: &[(&str, &str, usize, &str)] = &[
    (
        "server/src/cli.rs",
        "dispatch",
        227,
        "one match arm per command-line command",
    ),
    (
        "server/src/runtime/kube/objects.rs",
        "UserPlan::session_pod",
        186,
        "the pod object written out field by field",
    ),
    (
        "server/src/service/metrics.rs",
        "Metrics::new",
        170,
        "every metric registered with its help text",
    ),
    (
        "server/src/service/sessions.rs",
        "Sessions::dashboard",
        185,
        "gathers the dashboard's parts, each from the store",
    ),
    (
        "app/src/ui/admin/users/mod.rs",
        "UsersTab",
        206,
        "a component: its signals and one view! tree",
    ),
    (
        "app/src/ui/admin/users/row.rs",
        "UserRow",
        288,
        "a component: its actions and one view! tree",
    ),
    (
        "app/src/ui/dashboard/mod.rs",
        "DashboardView",
        177,
        "a component: its signals and one view! tree",
    ),
    (
        "app/src/ui/dashboard/mod.rs",
        "LaunchForm",
        288,
        "a component: the form's fields and one view! tree",
    ),
    (
        "app/src/ui/session/mod.rs",
        "SessionLive",
        494,
        "a component: the live session page as one view! tree",
    ),
];

/// How long a function may grow before it must be split.
const MOST_FUNCTION_LINES: usize = 150;

/// Each function's file, name and lines, test files (`tests*.rs`) and this test's left out.
fn function_sizes(crate_dir: &str) -> Vec<(String, String, usize)> {
    let src = sources(crate_dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("tests") || folder_of(&src, &file) == "layout_check" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        let path = format!(
            "{crate_dir}/src/{}",
            file.strip_prefix(&src).unwrap_or(&file).display()
        );
        for (function, lines) in functions(&text) {
            found.push((path.clone(), function, lines));
        }
    }
    found
}

#[test]
fn no_function_grows_past_150_lines() {
    let listed: BTreeMap<(&str, &str), usize> = LONG_FUNCTIONS
        .iter()
        .map(|&(file, function, lines, _)| ((file, function), lines))
        .collect();
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for (file, function, lines) in function_sizes("server")
        .into_iter()
        .chain(function_sizes("app"))
    {
        let key = (file.as_str(), function.as_str());
        match listed.get(&key) {
            Some(&at) => {
                seen.insert((file.clone(), function.clone()));
                if lines > at {
                    found.push(format!(
                        "{file}: `{function}` has {lines} lines, past its {at}: split it"
                    ));
                } else if lines <= MOST_FUNCTION_LINES {
                    found.push(format!(
                        "{file}: `{function}` has {lines} lines: take it off LONG_FUNCTIONS"
                    ));
                } else if lines < at {
                    found.push(format!(
                        "{file}: `{function}` has {lines} lines: lower its LONG_FUNCTIONS entry from {at}"
                    ));
                }
            }
            None if lines > MOST_FUNCTION_LINES => found.push(format!(
                "{file}: `{function}` has {lines} lines, past {MOST_FUNCTION_LINES}: split it into named phases"
            )),
            None => {}
        }
    }
    for (file, function) in listed.keys() {
        if !seen.contains(&(file.to_string(), function.to_string())) {
            found.push(format!(
                "{file}: `{function}` is gone; take it off LONG_FUNCTIONS"
            ));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
