//! Reclaiming idle GPUs, measured: the month of `bench/reclaim/personas.toml` replayed through the
//! real service once per policy (ours with its defaults, and the peers' published defaults), on
//! SQLite, and on PostgreSQL too when DATABASE_URL names one. Prints the table and the wrongful
//! reclaims with why, and writes `results.json` and `bars-<db>.svg` to the folder it prints
//! (`RECLAIM_OUT`, else a new one under the temporary folder). See `server::reclaim`.
//!
//! A month takes about 40 s a policy on SQLite and 4 minutes on PostgreSQL here, and the trace
//! and the store are deterministic, so PostgreSQL replays ours only (it must match SQLite's
//! figures), unless `RECLAIM_PG=all`.
//!
//! cargo bench -p server --bench reclaim
//! RECLAIM_DAYS=7 cargo bench -p server --bench reclaim     (a shorter month)
//! RECLAIM_ONLY=sooner cargo bench -p server --bench reclaim (the policies whose name has it)
//! RECLAIM_TIMEOUT=1200 RECLAIM_AWAY=300 RECLAIM_PARK=300 cargo bench ... (ours with other idle
//!                                                          defaults, s)

use server::reclaim::{Outcome, Personas, Policy, report, run};

/// Ours with the idle defaults the environment asks for, to weigh other defaults (parking stays
/// off where `policy` turns it off).
fn tuned(config: &mut server::config::Config, policy: Policy) {
    let seconds = |name| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    if let Some(timeout) = seconds("RECLAIM_TIMEOUT") {
        config.idle.timeout_seconds = timeout;
    }
    if let Some(away) = seconds("RECLAIM_AWAY") {
        config.idle.away_timeout_seconds = away;
    }
    if let Some(park) = seconds("RECLAIM_PARK").filter(|_| policy != Policy::OursNoParking) {
        config.idle.park_after_seconds = park;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut personas = Personas::repo_default();
    if let Some(days) = std::env::var("RECLAIM_DAYS")
        .ok()
        .and_then(|d| d.parse().ok())
    {
        personas.days = days;
    }
    let trace = personas.trace();
    let visits: usize = trace.people.iter().map(|p| p.visits.len()).sum();
    println!(
        "reclaim: {} people, {} visits over {} days, {} cards x {} slices of {} MiB, seed {}",
        trace.people.len(),
        visits,
        personas.days,
        personas.pool.cards,
        personas.pool.card_mib / personas.pool.slice_mib,
        personas.pool.slice_mib,
        personas.seed
    );
    let mut outcomes: Vec<Outcome> = Vec::new();
    for db in ["sqlite", "postgres"] {
        for policy in Policy::ALL {
            let every = std::env::var("RECLAIM_PG").is_ok_and(|v| v == "all");
            if std::env::var("RECLAIM_ONLY").is_ok_and(|only| !policy.name().contains(&only)) {
                continue;
            }
            if db == "postgres" && policy != Policy::Ours && !every {
                continue;
            }
            let Some(url) = run::fresh_database(db).await else {
                continue;
            };
            let started = std::time::Instant::now();
            let adjust = |c: &mut server::config::Config| {
                if policy.is_ours() {
                    tuned(c, policy)
                }
            };
            match run::simulate(&personas, &trace, policy, &url, adjust).await {
                Ok(outcome) => {
                    println!(
                        "  {} on {db}: {:.1} s, ledger balances: {}",
                        policy.name(),
                        started.elapsed().as_secs_f64(),
                        outcome.ledger_balances()
                    );
                    outcomes.push(outcome);
                }
                Err(e) => println!("  {} on {db}: failed: {e}", policy.name()),
            }
        }
    }
    // Not the waits: launches of one minute share its millisecond on the hand-moved clock, and
    // the queue serves those in the order of their (random) ids, so who waits a minute longer
    // may change from run to run.
    let same = |a: &Outcome, b: &Outcome| {
        (
            a.allocated_min,
            a.idle_min,
            a.wrongful.len(),
            a.charged_milli,
        ) == (
            b.allocated_min,
            b.idle_min,
            b.wrongful.len(),
            b.charged_milli,
        )
    };
    for pg in outcomes.iter().filter(|o| o.database == "postgres") {
        if let Some(lite) = outcomes
            .iter()
            .find(|o| o.database == "sqlite" && o.policy == pg.policy)
        {
            println!(
                "  {}: PostgreSQL's figures {} SQLite's",
                pg.policy,
                if same(pg, lite) {
                    "equal"
                } else {
                    "DIFFER from"
                }
            );
        }
    }
    println!("\n{}", report::table(&outcomes));
    print!("{}", report::wrongful(&outcomes));
    let out = std::env::var("RECLAIM_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::env::temp_dir().join(format!("reclaim-{}", server::util::new_id()))
        });
    std::fs::create_dir_all(&out).expect("the results folder");
    let json = serde_json::to_string_pretty(&outcomes).expect("results as JSON");
    std::fs::write(out.join("results.json"), json).expect("results.json");
    for db in ["sqlite", "postgres"] {
        let of_db: Vec<Outcome> = outcomes
            .iter()
            .filter(|o| o.database == db)
            .cloned()
            .collect();
        if !of_db.is_empty() {
            std::fs::write(out.join(format!("bars-{db}.svg")), report::svg(&of_db))
                .expect("the picture");
        }
    }
    println!("\nresults.json and bars-*.svg in {}", out.display());
}
