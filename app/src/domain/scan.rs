//! Scanned images: what a scanner's report says about an image, and whether the policy lets the
//! image be approved and launched. Reports come in Trivy's JSON (`trivy image -f json`) or in
//! SARIF 2.1.0 (`trivy image -f sarif`, and most other scanners); both are read into one summary
//! here, so the rules below never depend on the format.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// At most this many findings are kept with a summary (worst first), to show by name.
pub const MAX_TOP_FINDINGS: usize = 10;
const DAY_MS: i64 = 86_400_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Critical,
    High,
    Medium,
    Low,
    Unknown,
}

impl Severity {
    /// Worst first.
    pub const ALL: [Severity; 5] = [
        Severity::Critical,
        Severity::High,
        Severity::Medium,
        Severity::Low,
        Severity::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::High => "high",
            Severity::Medium => "medium",
            Severity::Low => "low",
            Severity::Unknown => "unknown",
        }
    }

    /// Trivy's `CRITICAL`…`UNKNOWN`, or the lowercase names, in any case.
    pub fn parse(text: &str) -> Option<Severity> {
        Severity::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// CVSS v3 bands, as SARIF's `security-severity` property carries them.
    fn from_score(score: f64) -> Severity {
        match score {
            s if s >= 9.0 => Severity::Critical,
            s if s >= 7.0 => Severity::High,
            s if s >= 4.0 => Severity::Medium,
            s if s > 0.0 => Severity::Low,
            _ => Severity::Unknown,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Findings counted by severity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub critical: u32,
    pub high: u32,
    pub medium: u32,
    pub low: u32,
    pub unknown: u32,
}

impl Counts {
    pub fn of(&self, severity: Severity) -> u32 {
        [
            self.critical,
            self.high,
            self.medium,
            self.low,
            self.unknown,
        ][severity.index()]
    }

    fn add(&mut self, severity: Severity) {
        let slot = match severity {
            Severity::Critical => &mut self.critical,
            Severity::High => &mut self.high,
            Severity::Medium => &mut self.medium,
            Severity::Low => &mut self.low,
            Severity::Unknown => &mut self.unknown,
        };
        *slot = slot.saturating_add(1);
    }

    pub fn total(&self) -> u32 {
        Severity::ALL.iter().map(|s| self.of(*s)).sum()
    }

    /// Those at `floor` or worse.
    pub fn at_least(&self, floor: Severity) -> u32 {
        Severity::ALL
            .iter()
            .filter(|s| **s <= floor)
            .map(|s| self.of(*s))
            .sum()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// e.g. `CVE-2024-6387`.
    pub id: String,
    /// The package it is in, where the report says.
    pub package: String,
    pub severity: Severity,
    /// The version that fixes it, where one exists.
    pub fixed_in: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportFormat {
    Trivy,
    Sarif,
}

impl ReportFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportFormat::Trivy => "trivy",
            ReportFormat::Sarif => "sarif",
        }
    }

    pub fn parse(text: &str) -> Option<ReportFormat> {
        match text {
            "trivy" => Some(ReportFormat::Trivy),
            "sarif" => Some(ReportFormat::Sarif),
            _ => None,
        }
    }
}

/// What a report says, whatever its format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanSummary {
    pub format: ReportFormat,
    /// The scanner's name and version, e.g. "Trivy 0.57.1".
    pub scanner: String,
    /// The image the report names (Trivy's `ArtifactName`, SARIF's `imageName`), if it does.
    pub artifact: Option<String>,
    /// When the scan ran, by the report; None where it does not say.
    pub scanned_at_ms: Option<i64>,
    pub found: Counts,
    /// Of those, the ones with a fixed version to move to.
    pub fixable: Counts,
    /// The worst findings, fixable first within a severity, at most [`MAX_TOP_FINDINGS`].
    pub top: Vec<Finding>,
}

/// Just enough of a document to tell the two formats apart.
#[derive(Deserialize)]
pub struct FormatProbe {
    #[serde(rename = "SchemaVersion")]
    schema_version: Option<IgnoredAny>,
    #[serde(rename = "Results")]
    results: Option<IgnoredAny>,
    version: Option<String>,
    runs: Option<IgnoredAny>,
}

impl FormatProbe {
    pub fn format(&self) -> Result<ReportFormat, String> {
        if self.runs.is_some() {
            return match self.version.as_deref() {
                Some("2.1.0") => Ok(ReportFormat::Sarif),
                other => Err(format!(
                    "a SARIF log must be version 2.1.0, not {}",
                    other.map_or("unversioned".to_string(), |v| format!("`{v}`"))
                )),
            };
        }
        if self.schema_version.is_some() || self.results.is_some() {
            return Ok(ReportFormat::Trivy);
        }
        Err(UNKNOWN_FORMAT.into())
    }
}

pub const UNKNOWN_FORMAT: &str = "not a scan report this server reads: post Trivy's JSON (`trivy image -f json`) or a SARIF 2.1.0 log (`trivy image -f sarif`)";

/// `trivy image -f json`, schema version 2: the fields read here, all others ignored.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TrivyReport {
    #[serde(default)]
    pub schema_version: Option<u32>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub artifact_name: Option<String>,
    #[serde(default)]
    pub trivy: Option<TrivyVersion>,
    #[serde(default)]
    pub results: Option<Vec<TrivyResult>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TrivyVersion {
    #[serde(default)]
    pub version: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TrivyResult {
    #[serde(default)]
    pub vulnerabilities: Option<Vec<TrivyVulnerability>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TrivyVulnerability {
    #[serde(rename = "VulnerabilityID", default)]
    pub vulnerability_id: String,
    #[serde(default)]
    pub pkg_name: String,
    #[serde(default)]
    pub fixed_version: Option<String>,
    #[serde(default)]
    pub severity: String,
}

/// A SARIF 2.1.0 log: the fields read here, all others ignored.
#[derive(Deserialize)]
pub struct SarifLog {
    #[serde(default)]
    pub runs: Vec<SarifRun>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRun {
    pub tool: SarifTool,
    #[serde(default)]
    pub results: Vec<SarifResult>,
    #[serde(default)]
    pub invocations: Vec<SarifInvocation>,
    #[serde(default)]
    pub properties: Option<SarifRunProperties>,
}

#[derive(Deserialize)]
pub struct SarifTool {
    pub driver: SarifDriver,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifDriver {
    pub name: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub semantic_version: Option<String>,
    #[serde(default)]
    pub rules: Vec<SarifRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRule {
    pub id: String,
    #[serde(default)]
    pub properties: Option<SarifRuleProperties>,
    #[serde(default)]
    pub default_configuration: Option<SarifConfiguration>,
}

#[derive(Deserialize)]
pub struct SarifRuleProperties {
    /// A CVSS score as text, e.g. "9.8" (GitHub's convention, which Trivy follows).
    #[serde(rename = "security-severity", default)]
    pub security_severity: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Deserialize)]
pub struct SarifConfiguration {
    #[serde(default)]
    pub level: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifResult {
    #[serde(default)]
    pub rule_id: Option<String>,
    #[serde(default)]
    pub rule_index: Option<usize>,
    #[serde(default)]
    pub level: Option<String>,
    #[serde(default)]
    pub message: Option<SarifMessage>,
    /// SARIF's own fix objects: a result that carries one is fixable.
    #[serde(default)]
    pub fixes: Vec<IgnoredAny>,
}

#[derive(Deserialize)]
pub struct SarifMessage {
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifInvocation {
    #[serde(default)]
    pub end_time_utc: Option<String>,
    #[serde(default)]
    pub start_time_utc: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifRunProperties {
    #[serde(default)]
    pub image_name: Option<String>,
}

/// Keeps the counts and the worst findings.
#[derive(Default)]
struct Tally {
    found: Counts,
    fixable: Counts,
    top: Vec<Finding>,
}

impl Tally {
    fn add(&mut self, finding: Finding) {
        self.found.add(finding.severity);
        if finding.fixed_in.is_some() {
            self.fixable.add(finding.severity);
        }
        self.top.push(finding);
        if self.top.len() > 4 * MAX_TOP_FINDINGS {
            self.trim();
        }
    }

    fn trim(&mut self) {
        self.top.sort_by(|a, b| {
            (a.severity, a.fixed_in.is_none(), &a.id).cmp(&(
                b.severity,
                b.fixed_in.is_none(),
                &b.id,
            ))
        });
        self.top
            .dedup_by(|a, b| a.id == b.id && a.package == b.package);
        self.top.truncate(MAX_TOP_FINDINGS);
    }

    fn finish(
        mut self,
        format: ReportFormat,
        scanner: String,
        artifact: Option<String>,
        at: Option<i64>,
    ) -> ScanSummary {
        self.trim();
        ScanSummary {
            format,
            scanner,
            artifact: artifact.filter(|a| !a.trim().is_empty()),
            scanned_at_ms: at,
            found: self.found,
            fixable: self.fixable,
            top: self.top,
        }
    }
}

fn nonempty(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
}

fn short(text: &str) -> String {
    text.chars().take(120).collect()
}

pub fn summarize_trivy(report: TrivyReport) -> Result<ScanSummary, String> {
    if let Some(v) = report.schema_version
        && v != 2
    {
        return Err(format!(
            "Trivy's JSON schema version {v} is not read here: scan with a Trivy of 0.20 or later (schema version 2)"
        ));
    }
    let Some(results) = report.results else {
        return Err("a Trivy report without `Results` says nothing about the image".into());
    };
    let at = match report.created_at.as_deref() {
        Some(text) => Some(
            super::dates::parse_rfc3339(text)
                .ok_or_else(|| format!("`CreatedAt` is not a time: `{}`", short(text)))?,
        ),
        None => None,
    };
    let mut tally = Tally::default();
    for vulnerability in results
        .into_iter()
        .flat_map(|r| r.vulnerabilities.unwrap_or_default())
    {
        tally.add(Finding {
            severity: Severity::parse(&vulnerability.severity).unwrap_or(Severity::Unknown),
            id: short(&vulnerability.vulnerability_id),
            package: short(&vulnerability.pkg_name),
            fixed_in: nonempty(vulnerability.fixed_version).map(|v| short(&v)),
        });
    }
    let scanner = match report.trivy.and_then(|t| nonempty(t.version)) {
        Some(version) => format!("Trivy {}", short(&version)),
        None => "Trivy".to_string(),
    };
    Ok(tally.finish(ReportFormat::Trivy, scanner, report.artifact_name, at))
}

/// A result's severity: the rule's severity tag (Trivy's), else its CVSS score, else the
/// result's or the rule's level.
fn sarif_severity(result: &SarifResult, rule: Option<&SarifRule>) -> Severity {
    let properties = rule.and_then(|r| r.properties.as_ref());
    if let Some(tagged) = properties.and_then(|p| p.tags.iter().find_map(|t| Severity::parse(t))) {
        return tagged;
    }
    if let Some(score) = properties
        .and_then(|p| p.security_severity.as_deref())
        .and_then(|s| s.trim().parse::<f64>().ok())
    {
        return Severity::from_score(score);
    }
    let level = result.level.as_deref().or_else(|| {
        rule.and_then(|r| r.default_configuration.as_ref())
            .and_then(|c| c.level.as_deref())
    });
    match level {
        Some("error") => Severity::High,
        Some("warning") => Severity::Medium,
        Some("note") => Severity::Low,
        _ => Severity::Unknown,
    }
}

/// The fixed version Trivy writes into a result's message ("Fixed Version: 1.2.3").
fn fixed_version_in(message: &str) -> Option<String> {
    message.lines().find_map(|line| {
        let version = line.trim().strip_prefix("Fixed Version:")?.trim();
        (!version.is_empty()).then(|| short(version))
    })
}

fn package_in(message: &str) -> String {
    message
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("Package:")
                .map(|p| short(p.trim()))
        })
        .unwrap_or_default()
}

pub fn summarize_sarif(log: SarifLog) -> Result<ScanSummary, String> {
    if log.runs.is_empty() {
        return Err("a SARIF log without `runs` says nothing about the image".into());
    }
    let mut tally = Tally::default();
    let mut scanners = Vec::new();
    let mut artifact = None;
    let mut at: Option<i64> = None;
    for run in log.runs {
        let driver = &run.tool.driver;
        let scanner = match driver.semantic_version.as_ref().or(driver.version.as_ref()) {
            Some(v) => format!("{} {}", short(&driver.name), short(v)),
            None => short(&driver.name),
        };
        if !scanners.contains(&scanner) {
            scanners.push(scanner);
        }
        for invocation in &run.invocations {
            let Some(text) = invocation
                .end_time_utc
                .as_deref()
                .or(invocation.start_time_utc.as_deref())
            else {
                continue;
            };
            let when = super::dates::parse_rfc3339(text)
                .ok_or_else(|| format!("an invocation's time is not a time: `{}`", short(text)))?;
            at = Some(at.map_or(when, |a| a.min(when)));
        }
        if artifact.is_none() {
            artifact = run.properties.and_then(|p| p.image_name);
        }
        for result in &run.results {
            let rule = result
                .rule_index
                .and_then(|i| driver.rules.get(i))
                .filter(|r| Some(&r.id) == result.rule_id.as_ref())
                .or_else(|| {
                    let id = result.rule_id.as_ref()?;
                    driver.rules.iter().find(|r| &r.id == id)
                });
            let message = result
                .message
                .as_ref()
                .and_then(|m| m.text.as_deref())
                .unwrap_or_default();
            let fixed_in = fixed_version_in(message)
                .or_else(|| (!result.fixes.is_empty()).then(|| "a fix in the report".into()));
            tally.add(Finding {
                id: short(result.rule_id.as_deref().unwrap_or("unnamed rule")),
                package: package_in(message),
                severity: sarif_severity(result, rule),
                fixed_in,
            });
        }
    }
    Ok(tally.finish(ReportFormat::Sarif, scanners.join(", "), artifact, at))
}

/// An image's repository: its reference without a tag or digest.
fn repository(reference: &str) -> &str {
    let name = reference.split('@').next().unwrap_or(reference);
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    match name[last_slash..].rfind(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    }
}

/// Refuses a report that names another image than the one it is posted to.
pub fn check_artifact(summary: &ScanSummary, image_reference: &str) -> Result<(), String> {
    match &summary.artifact {
        Some(artifact) if repository(artifact.trim()) != repository(image_reference) => {
            Err(format!(
                "this report is about `{}`, not `{image_reference}`: post each image's own scan",
                short(artifact)
            ))
        }
        _ => Ok(()),
    }
}

/// What an image's scans must show before it may be approved and launched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanPolicy {
    /// An image without any report may not be approved or launched.
    pub require_scan: bool,
    /// A report older than this many days no longer counts (0: any age).
    pub max_age_days: u32,
    /// Findings at this severity or worse that have a fix block the image; None: none do.
    pub block_fixable_at: Option<Severity>,
}

impl Default for ScanPolicy {
    fn default() -> Self {
        ScanPolicy {
            require_scan: true,
            max_age_days: 30,
            block_fixable_at: Some(Severity::Critical),
        }
    }
}

/// A report as the policy reads it: its findings and its age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanFacts {
    pub fixable: Counts,
    /// The scan's own time where the report gives one, else when it was posted.
    pub scanned_at_ms: i64,
}

/// Ok when `latest` (the newest report) satisfies `policy` at `now_ms`; else why not.
pub fn verdict(policy: &ScanPolicy, latest: Option<ScanFacts>, now_ms: i64) -> Result<(), String> {
    let Some(scan) = latest else {
        return if policy.require_scan {
            Err("no scan report yet: the policy needs one (post Trivy's JSON or SARIF to the image)".into())
        } else {
            Ok(())
        };
    };
    if policy.max_age_days > 0 {
        let age_days = (now_ms - scan.scanned_at_ms).max(0) / DAY_MS;
        if age_days > i64::from(policy.max_age_days) {
            return Err(format!(
                "its newest scan is {age_days} days old; the policy accepts at most {} days: scan it again",
                policy.max_age_days
            ));
        }
    }
    if let Some(floor) = policy.block_fixable_at {
        let blocking = scan.fixable.at_least(floor);
        if blocking > 0 {
            let which = if floor == Severity::Critical {
                "critical".to_string()
            } else {
                format!("{} or worse", floor.as_str())
            };
            return Err(format!(
                "{blocking} {which} finding{} ha{} a fix available: rebuild the image on the fixed packages",
                if blocking == 1 { "" } else { "s" },
                if blocking == 1 { "s" } else { "ve" }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_780_000_000_000; // 2026-05-28

    fn counts(critical: u32, high: u32) -> Counts {
        Counts {
            critical,
            high,
            ..Counts::default()
        }
    }

    #[test]
    fn the_policy_needs_a_recent_report_without_fixable_criticals() {
        let policy = ScanPolicy::default();
        let fresh = |fixable| ScanFacts {
            fixable,
            scanned_at_ms: NOW - 2 * DAY_MS,
        };
        assert!(
            verdict(&policy, None, NOW)
                .unwrap_err()
                .contains("no scan report")
        );
        assert_eq!(verdict(&policy, Some(fresh(counts(0, 7))), NOW), Ok(()));
        let err = verdict(&policy, Some(fresh(counts(2, 0))), NOW).unwrap_err();
        assert!(err.starts_with("2 critical findings have a fix"), "{err}");
        let err = verdict(&policy, Some(fresh(counts(1, 0))), NOW).unwrap_err();
        assert!(err.starts_with("1 critical finding has a fix"), "{err}");
        let old = ScanFacts {
            fixable: Counts::default(),
            scanned_at_ms: NOW - 31 * DAY_MS,
        };
        let err = verdict(&policy, Some(old), NOW).unwrap_err();
        assert!(
            err.contains("31 days old") && err.contains("at most 30"),
            "{err}"
        );
        // Exactly 30 days is still within.
        let edge = ScanFacts {
            scanned_at_ms: NOW - 30 * DAY_MS,
            ..old
        };
        assert_eq!(verdict(&policy, Some(edge), NOW), Ok(()));
    }

    #[test]
    fn each_part_of_the_policy_can_be_turned_off_or_tightened() {
        let lax = ScanPolicy {
            require_scan: false,
            max_age_days: 0,
            block_fixable_at: None,
        };
        assert_eq!(verdict(&lax, None, NOW), Ok(()));
        let ancient = ScanFacts {
            fixable: counts(5, 5),
            scanned_at_ms: 0,
        };
        assert_eq!(verdict(&lax, Some(ancient), NOW), Ok(()));
        let strict = ScanPolicy {
            block_fixable_at: Some(Severity::High),
            ..ScanPolicy::default()
        };
        let high = ScanFacts {
            fixable: counts(0, 3),
            scanned_at_ms: NOW,
        };
        let err = verdict(&strict, Some(high), NOW).unwrap_err();
        assert!(err.starts_with("3 high or worse findings"), "{err}");
    }

    fn trivy(doc: &str) -> ScanSummary {
        summarize_trivy(serde_json_like(doc)).unwrap()
    }

    // The server decodes the documents (the domain reads no JSON itself); so do the tests.
    fn serde_json_like<T: serde::de::DeserializeOwned>(doc: &str) -> T {
        serde_json::from_str(doc).unwrap()
    }

    const TRIVY: &str = r#"{
      "SchemaVersion": 2,
      "CreatedAt": "2026-05-26T09:15:02.381517+02:00",
      "ArtifactName": "registry.example.com/ml/torch-notebook:2.5",
      "ArtifactType": "container_image",
      "Metadata": {"OS": {"Family": "ubuntu", "Name": "24.04"}, "ImageID": "sha256:ab"},
      "Trivy": {"Version": "0.57.1"},
      "Results": [
        {"Target": "registry.example.com/ml/torch-notebook:2.5 (ubuntu 24.04)", "Class": "os-pkgs", "Type": "ubuntu",
         "Vulnerabilities": [
          {"VulnerabilityID": "CVE-2024-6387", "PkgName": "openssh-client", "InstalledVersion": "1:9.6p1-3ubuntu13",
           "FixedVersion": "1:9.6p1-3ubuntu13.3", "Status": "fixed", "Severity": "HIGH"},
          {"VulnerabilityID": "CVE-2024-45491", "PkgName": "libexpat1", "InstalledVersion": "2.6.1-2",
           "FixedVersion": "2.6.1-2ubuntu0.1", "Status": "fixed", "Severity": "CRITICAL"},
          {"VulnerabilityID": "CVE-2016-2781", "PkgName": "coreutils", "InstalledVersion": "9.4-3ubuntu6",
           "Status": "affected", "Severity": "LOW"}
         ]},
        {"Target": "opt/conda/lib/python3.11/site-packages/torch-2.5.1.dist-info/METADATA", "Class": "lang-pkgs", "Type": "python-pkg",
         "Vulnerabilities": [
          {"VulnerabilityID": "CVE-2025-32434", "PkgName": "torch", "InstalledVersion": "2.5.1", "FixedVersion": "2.6.0",
           "Severity": "CRITICAL"},
          {"VulnerabilityID": "GHSA-xxxx", "PkgName": "jinja2", "InstalledVersion": "3.1.4", "FixedVersion": "",
           "Severity": "MEDIUM"}
         ]},
        {"Target": "Python", "Class": "lang-pkgs", "Type": "python-pkg", "Vulnerabilities": null}
      ]
    }"#;

    #[test]
    fn a_trivy_report_is_counted_by_severity_with_its_fixes() {
        let probe: FormatProbe = serde_json_like(TRIVY);
        assert_eq!(probe.format(), Ok(ReportFormat::Trivy));
        let summary = trivy(TRIVY);
        assert_eq!(summary.scanner, "Trivy 0.57.1");
        assert_eq!(
            summary.artifact.as_deref(),
            Some("registry.example.com/ml/torch-notebook:2.5")
        );
        // 09:15:02 at +02:00 is 07:15:02 UTC.
        assert_eq!(
            summary.scanned_at_ms.map(super::super::dates::rfc3339),
            Some("2026-05-26T07:15:02Z".into())
        );
        assert_eq!(
            summary.found,
            Counts {
                critical: 2,
                high: 1,
                medium: 1,
                low: 1,
                unknown: 0
            }
        );
        assert_eq!(summary.fixable, counts(2, 1));
        assert_eq!(summary.top[0].id, "CVE-2024-45491");
        assert_eq!(summary.top[0].fixed_in.as_deref(), Some("2.6.1-2ubuntu0.1"));
        assert_eq!(summary.top.last().unwrap().id, "CVE-2016-2781");
        assert_eq!(
            check_artifact(
                &summary,
                "registry.example.com/ml/torch-notebook:2.5@sha256:00"
            ),
            Ok(())
        );
        let err = check_artifact(&summary, "registry.example.com/ml/other:2.5").unwrap_err();
        assert!(
            err.contains("not `registry.example.com/ml/other:2.5`"),
            "{err}"
        );
    }

    #[test]
    fn trivy_reports_of_another_schema_or_without_results_are_refused() {
        let old: TrivyReport = serde_json_like(r#"{"SchemaVersion": 1, "Results": []}"#);
        assert!(
            summarize_trivy(old)
                .unwrap_err()
                .contains("schema version 1")
        );
        let empty: TrivyReport = serde_json_like(r#"{"SchemaVersion": 2}"#);
        assert!(
            summarize_trivy(empty)
                .unwrap_err()
                .contains("without `Results`")
        );
        let bad_time: TrivyReport =
            serde_json_like(r#"{"SchemaVersion": 2, "CreatedAt": "yesterday", "Results": []}"#);
        assert!(
            summarize_trivy(bad_time)
                .unwrap_err()
                .contains("not a time")
        );
        // A clean image: no findings at all, and no time (the server then uses the post's).
        let clean = trivy(r#"{"SchemaVersion": 2, "Results": [{"Target": "x"}]}"#);
        assert_eq!(clean.found.total(), 0);
        assert_eq!(clean.scanned_at_ms, None);
    }

    const SARIF: &str = r#"{
      "version": "2.1.0",
      "$schema": "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/main/sarif-2.1/schema/sarif-schema-2.1.0.json",
      "runs": [{
        "tool": {"driver": {
          "fullName": "Trivy Vulnerability Scanner", "informationUri": "https://github.com/aquasecurity/trivy",
          "name": "Trivy", "version": "0.57.1",
          "rules": [
            {"id": "CVE-2024-45491", "name": "OsPackageVulnerability", "shortDescription": {"text": "libexpat: overflow"},
             "defaultConfiguration": {"level": "error"},
             "properties": {"precision": "very-high", "security-severity": "9.8", "tags": ["vulnerability", "security", "CRITICAL"]}},
            {"id": "CVE-2024-6387", "name": "OsPackageVulnerability", "defaultConfiguration": {"level": "error"},
             "properties": {"precision": "very-high", "security-severity": "8.1", "tags": ["vulnerability", "security", "HIGH"]}},
            {"id": "CVE-2016-2781", "name": "OsPackageVulnerability", "defaultConfiguration": {"level": "note"},
             "properties": {"security-severity": "2.0"}}
          ]}},
        "results": [
          {"ruleId": "CVE-2024-45491", "ruleIndex": 0, "level": "error",
           "message": {"text": "Package: libexpat1\nInstalled Version: 2.6.1-2\nVulnerability CVE-2024-45491\nSeverity: CRITICAL\nFixed Version: 2.6.1-2ubuntu0.1\nLink: [CVE-2024-45491](https://avd.aquasec.com/nvd/cve-2024-45491)"},
           "locations": [{"physicalLocation": {"artifactLocation": {"uri": "library/ubuntu", "uriBaseId": "ROOTPATH"}}}]},
          {"ruleId": "CVE-2024-6387", "ruleIndex": 1, "level": "error",
           "message": {"text": "Package: openssh-client\nInstalled Version: 1:9.6p1-3ubuntu13\nVulnerability CVE-2024-6387\nSeverity: HIGH\nFixed Version: \nLink: x"}},
          {"ruleId": "CVE-2016-2781", "ruleIndex": 2, "level": "note", "message": {"text": "Package: coreutils"},
           "fixes": [{"description": {"text": "upgrade"}, "artifactChanges": []}]}
        ],
        "invocations": [{"executionSuccessful": true, "startTimeUtc": "2026-05-27T10:00:00Z", "endTimeUtc": "2026-05-27T10:02:11Z"}],
        "columnKind": "utf16CodeUnits",
        "properties": {"imageName": "registry.example.com/ml/torch-notebook:2.5", "repoDigests": []}
      }]
    }"#;

    #[test]
    fn a_sarif_log_is_counted_by_its_rules_severities() {
        let probe: FormatProbe = serde_json_like(SARIF);
        assert_eq!(probe.format(), Ok(ReportFormat::Sarif));
        let summary = summarize_sarif(serde_json_like(SARIF)).unwrap();
        assert_eq!(summary.format, ReportFormat::Sarif);
        assert_eq!(summary.scanner, "Trivy 0.57.1");
        assert_eq!(
            summary.scanned_at_ms.map(super::super::dates::rfc3339),
            Some("2026-05-27T10:02:11Z".into())
        );
        assert_eq!(
            summary.found,
            Counts {
                critical: 1,
                high: 1,
                low: 1,
                ..Counts::default()
            }
        );
        // The openssh result names no fixed version; the coreutils one carries a SARIF fix.
        assert_eq!(
            summary.fixable,
            Counts {
                critical: 1,
                low: 1,
                ..Counts::default()
            }
        );
        assert_eq!(summary.top[0].package, "libexpat1");
        assert_eq!(
            summary.artifact.as_deref(),
            Some("registry.example.com/ml/torch-notebook:2.5")
        );
    }

    #[test]
    fn sarif_severity_falls_back_from_tags_to_scores_to_levels() {
        let result = |level: Option<&str>| SarifResult {
            rule_id: Some("r".into()),
            rule_index: None,
            level: level.map(str::to_string),
            message: None,
            fixes: Vec::new(),
        };
        let rule = |score: Option<&str>| SarifRule {
            id: "r".into(),
            properties: Some(SarifRuleProperties {
                security_severity: score.map(str::to_string),
                tags: vec!["security".into()],
            }),
            default_configuration: None,
        };
        assert_eq!(
            sarif_severity(&result(None), Some(&rule(Some("7.0")))),
            Severity::High
        );
        assert_eq!(
            sarif_severity(&result(None), Some(&rule(Some("4.2")))),
            Severity::Medium
        );
        assert_eq!(
            sarif_severity(&result(Some("error")), Some(&rule(None))),
            Severity::High
        );
        assert_eq!(sarif_severity(&result(Some("note")), None), Severity::Low);
        assert_eq!(sarif_severity(&result(None), None), Severity::Unknown);
    }

    #[test]
    fn documents_of_neither_format_or_another_sarif_version_are_refused() {
        let other: FormatProbe = serde_json_like(r#"{"bomFormat": "CycloneDX"}"#);
        assert_eq!(other.format(), Err(UNKNOWN_FORMAT.into()));
        let old: FormatProbe = serde_json_like(r#"{"version": "1.0.0", "runs": []}"#);
        assert!(
            old.format()
                .unwrap_err()
                .contains("version 2.1.0, not `1.0.0`")
        );
        let empty: SarifLog = serde_json_like(r#"{"version": "2.1.0", "runs": []}"#);
        assert!(
            summarize_sarif(empty)
                .unwrap_err()
                .contains("without `runs`")
        );
    }

    #[test]
    fn the_top_findings_are_the_worst_and_bounded() {
        let mut tally = Tally::default();
        for i in 0..100 {
            tally.add(Finding {
                id: format!("CVE-{i:03}"),
                package: "p".into(),
                severity: if i % 10 == 0 {
                    Severity::Critical
                } else {
                    Severity::Low
                },
                fixed_in: None,
            });
        }
        let summary = tally.finish(ReportFormat::Trivy, "Trivy".into(), None, None);
        assert_eq!(summary.found.critical, 10);
        assert_eq!(summary.found.low, 90);
        assert_eq!(summary.top.len(), MAX_TOP_FINDINGS);
        assert!(summary.top.iter().all(|f| f.severity == Severity::Critical));
    }
}
