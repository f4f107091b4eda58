//! The simulator's report: a table for the terminal and BENCHMARKS.md, the results as JSON, and
//! a picture of bars per policy (SVG, drawn by hand as the product's own charts are: a few
//! rectangles need no plotting crate).

use super::run::Outcome;
use std::fmt::Write;

fn credits(milli: i64) -> String {
    format!("{:.1}", milli as f64 / 1000.0)
}

/// The table: one row per policy and database.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| policy | db | alloc GPU-h | used GPU-h | idle | wrongful | warned at the screen (an hour there) | reclaims (relaunched) | parked, resumed (min waited) | wait p50/p95/max min | credits for idle |"
    );
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for o in outcomes {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.0} | {:.1} % | {} | {} ({:.2}) | {} ({}) | {}, {} ({}) | {}/{}/{} | {} of {} |",
            o.policy,
            o.database,
            o.allocated_min as f64 / 60.0,
            o.used_min as f64 / 60.0,
            o.idle_share() * 100.0,
            o.wrongful.len(),
            o.warnings_at_screen,
            o.warnings_per_hour(),
            o.reclaims,
            o.relaunches,
            o.parks,
            o.resumes,
            o.waited_for_gpu_min,
            o.wait(0.5),
            o.wait(0.95),
            o.wait(1.0),
            credits(o.idle_charged_milli),
            credits(o.charged_milli),
        );
    }
    out
}

/// The wrongful reclaims, each with why.
pub fn wrongful(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    for o in outcomes.iter().filter(|o| !o.wrongful.is_empty()) {
        let _ = writeln!(
            out,
            "{} ({}): {} wrongful",
            o.policy,
            o.database,
            o.wrongful.len()
        );
        for w in &o.wrongful {
            let _ = writeln!(out, "  {} {} ({}): {}", w.at, w.user, w.persona, w.why);
        }
    }
    out
}

/// Bars per policy: allocated GPU-hours split into used and idle, with wrongful reclaims and
/// the 95th percentile wait written beside them.
pub fn svg(outcomes: &[Outcome]) -> String {
    let width = 980.0;
    let left = 210.0;
    let bar_w = 380.0;
    let row = 34.0;
    let height = 60.0 + row * outcomes.len() as f64;
    let most = outcomes
        .iter()
        .map(|o| o.allocated_min)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">
<title>Allocated GPU-hours per policy: used and idle</title>
<text x="10" y="20" font-weight="bold">Allocated GPU-hours per policy, the same month: used (dark) and idle (light)</text>
"##
    );
    for (i, o) in outcomes.iter().enumerate() {
        let y = 40.0 + row * i as f64;
        let used = bar_w * o.used_min as f64 / most;
        let idle = bar_w * o.idle_min as f64 / most;
        let _ = write!(
            out,
            r##"<text x="10" y="{ty}">{name} ({db})</text>
<rect x="{left}" y="{y}" width="{used:.1}" height="20" fill="#2f5d8a"/>
<rect x="{ix:.1}" y="{y}" width="{idle:.1}" height="20" fill="#a9c4de"/>
<text x="{lx:.1}" y="{ty}">{ah:.0} h, {share:.1} % idle, {wrong} wrongful, p95 wait {p95} min</text>
"##,
            ty = y + 15.0,
            name = o.policy,
            db = o.database,
            ix = left + used,
            lx = left + used + idle + 6.0,
            ah = o.allocated_min as f64 / 60.0,
            share = o.idle_share() * 100.0,
            wrong = o.wrongful.len(),
            p95 = o.wait(0.95),
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(policy: &'static str, allocated: u64, idle: u64) -> Outcome {
        Outcome {
            policy,
            database: "sqlite".into(),
            people: 1,
            days: 1,
            slots: 1,
            allocated_min: allocated,
            used_min: allocated - idle,
            idle_min: idle,
            wrongful: Vec::new(),
            reclaims: 0,
            relaunches: 0,
            warnings_at_screen: 3,
            present_min: 120,
            parks: 2,
            resumes: 1,
            waited_for_gpu_min: 0,
            waits_min: vec![0, 0, 3, 10],
            charged_milli: 2000,
            idle_charged_milli: 500,
            balances: Vec::new(),
            sessions: Vec::new(),
        }
    }

    #[test]
    fn bars_scale_to_the_largest_allocation() {
        let svg = svg(&[outcome("ours", 600, 60), outcome("peer", 1200, 600)]);
        // The peer's two bars fill the whole width (380); ours' used bar is 540/1200 of it.
        assert!(svg.contains(r#"width="190.0""#), "{svg}");
        assert!(svg.contains(r#"width="171.0""#), "{svg}");
        assert_eq!(svg.matches("<rect").count(), 4);
    }

    #[test]
    fn the_table_gives_shares_percentiles_and_credits() {
        let t = table(&[outcome("ours", 600, 60)]);
        assert!(
            t.contains(
                "| ours | sqlite | 10 | 9 | 10.0 % | 0 | 3 (1.50) | 0 (0) | 2, 1 (0) | 0/10/10 | 0.5 of 2.0 |"
            ),
            "{t}"
        );
    }
}
