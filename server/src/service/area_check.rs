//! Where each area's operations live, checked on every test run: a service file holds the
//! `impl` blocks of the areas its row names and no others, so an area's operations are found
//! where the table says; and no `Deref` in the service, so no type hands out another's handles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Service file → the areas (and shared parts) whose operations it holds.
const AREAS: &[(&str, &[&str])] = &[
    ("accounts.rs", &["Accounts"]),
    ("admin.rs", &["Admin"]),
    ("backups.rs", &["Backups"]),
    ("backups/cluster.rs", &["Backups"]),
    ("backups/export.rs", &["Backups"]),
    ("datasets.rs", &["Datasets"]),
    // A deleted account's undo is the admin's; its purge the reaper's.
    ("departed.rs", &["Admin", "Guard"]),
    ("follow.rs", &["Launcher"]),
    ("guard/leases.rs", &["Guard"]),
    ("guard/mod.rs", &["Guard"]),
    ("guard/queue.rs", &["Guard"]),
    ("guard/reaper.rs", &["Guard"]),
    ("guard/recovery.rs", &["Guard"]),
    ("guard/sampler.rs", &["Guard"]),
    ("guard/warm.rs", &["Guard", "WarmPool"]),
    ("handles.rs", &["Handles"]),
    ("images.rs", &["Images"]),
    ("launch.rs", &["Launcher"]),
    ("lifecycle.rs", &["Lifecycle"]),
    ("metrics.rs", &["Exporter"]),
    ("parking.rs", &["Lifecycle"]),
    ("mod.rs", &["Service"]),
    ("promotion.rs", &["Promotions"]),
    ("routes.rs", &["Access"]),
    ("sessions.rs", &["Sessions"]),
];

const AREA_TYPES: &[&str] = &[
    "Access",
    "Accounts",
    "Admin",
    "Backups",
    "Datasets",
    "Exporter",
    "Guard",
    "Handles",
    "Images",
    "Launcher",
    "Lifecycle",
    "Promotions",
    "Service",
    "Sessions",
    "WarmPool",
];

/// The area types `source` has `impl` blocks of (`impl X {`, not `impl Trait for X`).
fn implemented(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter_map(|line| line.strip_prefix("impl "))
        .filter_map(|rest| rest.strip_suffix(" {"))
        .filter(|name| AREA_TYPES.contains(name))
        .map(str::to_string)
        .collect()
}

fn derefs(source: &str) -> bool {
    source.lines().any(|line| {
        let line = line.trim_start();
        line.starts_with("impl") && line.contains("Deref for ")
    })
}

fn service_files() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/service");
    let mut files = BTreeMap::new();
    let mut folders = vec![root.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("the service folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path
                    .strip_prefix(&root)
                    .expect("inside")
                    .display()
                    .to_string();
                files.insert(name, std::fs::read_to_string(&path).expect("a source file"));
            }
        }
    }
    files
}

fn misplaced(files: &BTreeMap<String, String>) -> Vec<String> {
    let table: BTreeMap<&str, &[&str]> = AREAS.iter().copied().collect();
    let mut found = Vec::new();
    for (name, source) in files {
        let has = implemented(source);
        let may: BTreeSet<String> = table
            .get(name.as_str())
            .map(|areas| areas.iter().map(|a| a.to_string()).collect())
            .unwrap_or_default();
        for area in has.difference(&may) {
            found.push(format!(
                "service/{name} has `impl {area}`: not in its row of AREAS"
            ));
        }
        for area in may.difference(&has) {
            found.push(format!(
                "service/{name}: no `impl {area}` any more: take it off AREAS"
            ));
        }
        if derefs(source) {
            found.push(format!("service/{name} implements Deref"));
        }
    }
    for (name, _) in AREAS {
        if !files.contains_key(*name) {
            found.push(format!("service/{name} is on AREAS but gone"));
        }
    }
    found
}

#[test]
fn each_area_lives_where_the_table_says() {
    let found = misplaced(&service_files());
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_check_sees_a_stray_impl_and_a_deref() {
    let mut files = service_files();
    files.insert(
        "images.rs".into(),
        format!("{}\nimpl Sessions {{\n}}\n", files["images.rs"]),
    );
    files.insert(
        "routes.rs".into(),
        format!(
            "{}\nimpl std::ops::Deref for Access {{\n}}\n",
            files["routes.rs"]
        ),
    );
    let found = misplaced(&files);
    assert!(
        found
            .iter()
            .any(|f| f.contains("images.rs has `impl Sessions`"))
    );
    assert!(
        found
            .iter()
            .any(|f| f == "service/routes.rs implements Deref")
    );
}
