//! The reclaim simulator kept honest (`server::reclaim`): short spans of the persona file's
//! people, replayed through the real service and store on SQLite, on a hand-moved clock.

use server::reclaim::run::{self, Ended};
use server::reclaim::trace::Kind;
use server::reclaim::{Personas, Policy};

/// The repository's people of `kinds` only, `count` of each, coming every day for `days` days.
fn only(kinds: &[Kind], count: u32, days: u32) -> Personas {
    let mut personas = Personas::repo_default();
    personas.days = days;
    personas.persona.retain(|p| kinds.contains(&p.kind));
    for p in &mut personas.persona {
        p.count = count;
        p.chance = 1.0;
    }
    personas
}

async fn month(personas: &Personas, policy: Policy) -> run::Outcome {
    month_with(personas, policy, |_| {}).await
}

async fn month_with(
    personas: &Personas,
    policy: Policy,
    adjust: impl FnOnce(&mut server::config::Config),
) -> run::Outcome {
    let url = run::fresh_database("sqlite").await.expect("a database");
    run::simulate(personas, &personas.trace(), policy, &url, adjust)
        .await
        .expect("the simulation")
}

#[tokio::test]
async fn a_persona_whose_job_runs_is_never_reclaimed_by_our_policy() {
    let personas = only(&[Kind::FineTune], 2, 2);
    let ours = month(&personas, Policy::Ours).await;
    let unattended: u32 = ours
        .sessions
        .iter()
        .map(|s| s.allocated_min - s.idle_min)
        .sum();
    assert!(unattended > 120, "the jobs ran: {unattended} min");
    assert!(ours.wrongful.is_empty(), "{:#?}", ours.wrongful);
    // Once each job is done, nothing is left running: the session goes as idle.
    assert!(
        ours.sessions
            .iter()
            .all(|s| s.how == Some(Ended::Reclaimed)),
        "{:#?}",
        ours.sessions
    );
    // The same trace under a rule that sees no job without a browser or kernel.
    let culler = month(&personas, Policy::JupyterHub).await;
    assert!(
        !culler.wrongful.is_empty(),
        "the simulator must see the culler end running jobs"
    );
}

#[tokio::test]
async fn a_persona_that_leaves_is_reclaimed_within_one_timeout_plus_one_period() {
    let personas = only(
        &[Kind::LaptopClosed, Kind::OvernightTab, Kind::MemoryHolder],
        1,
        2,
    );
    let config = run::config_for(&personas, Policy::Ours, |_| {});
    let timeout_min = (config.idle.timeout_seconds / 60) as u32;
    // The simulator's reaper passes once a minute.
    let period_min = 1;
    let ours = month(&personas, Policy::Ours).await;
    let left: Vec<_> = ours
        .sessions
        .iter()
        .filter(|s| s.how != Some(Ended::Person))
        .collect();
    assert!(left.len() >= 4, "{:#?}", ours.sessions);
    for s in left {
        let ended = s.ended.expect("ended");
        assert!(
            ended - s.last_signal <= timeout_min + period_min,
            "{} left at minute {} and was reclaimed at {}",
            s.user,
            s.last_signal,
            ended
        );
        assert_eq!(s.how, Some(Ended::Reclaimed), "{s:?}");
    }
    assert!(ours.wrongful.is_empty(), "{:#?}", ours.wrongful);
}

/// Minutes from a no-page session's last work to its reclaim, at most: the page's going, the
/// away timeout, a pass.
fn away_bound(personas: &Personas) -> u32 {
    let config = run::config_for(personas, Policy::Ours, |_| {});
    let gone = app::domain::idle::PAGE_GONE_MS as u32 / 60_000;
    gone + (config.idle.away_timeout_seconds / 60) as u32 + 1
}

#[tokio::test]
async fn with_no_page_open_a_session_left_behind_goes_within_the_away_timeout() {
    // Closed laptops, a model left in memory with the tab closed, and lunch with the tab in
    // the background; a fine-tune's job that must still run to its end.
    let personas = only(
        &[
            Kind::LaptopClosed,
            Kind::MemoryHolder,
            Kind::AfterLunch,
            Kind::FineTune,
        ],
        1,
        2,
    );
    let bound = away_bound(&personas);
    let late = |outcome: &run::Outcome| -> Vec<String> {
        outcome
            .sessions
            .iter()
            .filter(|s| s.how == Some(Ended::Reclaimed))
            .filter(|s| s.ended.expect("ended") - s.last_signal > bound)
            .map(|s| format!("{} quiet at {}, ended {:?}", s.user, s.last_signal, s.ended))
            .collect()
    };
    let ours = month(&personas, Policy::Ours).await;
    let reclaimed = ours
        .sessions
        .iter()
        .filter(|s| s.how == Some(Ended::Reclaimed))
        .count();
    assert!(reclaimed >= 6, "{:#?}", ours.sessions);
    assert!(late(&ours).is_empty(), "{:#?}", late(&ours));
    assert!(ours.wrongful.is_empty(), "{:#?}", ours.wrongful);
    // The same people with the rule off wait out the whole timeout.
    let off = month_with(&personas, Policy::Ours, |c| c.idle.away_timeout_seconds = 0).await;
    assert!(!late(&off).is_empty(), "the rule off must be seen");
    assert!(off.idle_min > ours.idle_min);
}

#[tokio::test]
async fn a_tab_sent_to_the_background_goes_within_the_away_timeout_of_leaving() {
    // Lunch with the tab in the background: the page says it left, so the away rule counts
    // from then, not from a beat gone overdue.
    let personas = only(&[Kind::AfterLunch], 2, 2);
    let config = run::config_for(&personas, Policy::Ours, |_| {});
    // The minute it went into the background, the away timeout, a pass.
    let bound = 1 + (config.idle.away_timeout_seconds / 60) as u32 + 1;
    let ours = month(&personas, Policy::Ours).await;
    let lunches: Vec<_> = ours
        .sessions
        .iter()
        .filter(|s| s.how == Some(Ended::Reclaimed))
        .collect();
    assert!(lunches.len() >= 3, "{:#?}", ours.sessions);
    for s in &lunches {
        let ended = s.ended.expect("ended");
        assert!(
            ended - s.last_signal <= bound,
            "{} typed last at {}, ended at {} (bound {bound})",
            s.user,
            s.last_signal,
            ended
        );
    }
    assert!(ours.wrongful.is_empty(), "{:#?}", ours.wrongful);
}

#[tokio::test]
async fn a_shorter_timeout_warns_the_people_at_the_screen_more_often() {
    // Readers whose pauses at the screen are exponential: the shorter the timeout, the more
    // pauses outlast it less the warning, and each such pause is a warning they must answer.
    let personas = only(&[Kind::Interactive], 2, 3);
    let default = month(&personas, Policy::Ours).await;
    let short = month_with(&personas, Policy::Ours, |c| {
        c.idle.timeout_seconds = 8 * 60;
        c.idle.warn_seconds = 3 * 60;
    })
    .await;
    assert!(short.present_min > 120, "{}", short.present_min);
    assert_eq!(
        short.present_min, default.present_min,
        "the same people, at the screen as long"
    );
    assert!(
        short.warnings_at_screen > default.warnings_at_screen,
        "{} warnings at 8 min, {} at the default",
        short.warnings_at_screen,
        default.warnings_at_screen
    );
    // They answer, so no warning costs them their work.
    assert!(short.wrongful.is_empty(), "{:#?}", short.wrongful);
    let peer = month(&personas, Policy::SageMaker).await;
    assert_eq!(peer.warnings_at_screen, 0, "the peers warn nobody");
}

#[tokio::test]
async fn a_person_reading_in_another_tab_is_warned_by_notification_and_one_who_misses_it_counts() {
    // Every pause in another tab, and a short away rule: our hidden page notifies.
    let mut personas = only(&[Kind::Interactive], 2, 2);
    for p in &mut personas.persona {
        p.other_tab_share = 1.0;
    }
    let away = |c: &mut server::config::Config| c.idle.away_timeout_seconds = 180;
    let answering = month_with(&personas, Policy::Ours, away).await;
    assert!(answering.warnings_at_screen > 0, "{answering:#?}");
    personas.answers_notification = 0.0;
    let missing = month_with(&personas, Policy::Ours, away).await;
    // Ending a session whose person reads in another tab is wrongful: the cost of a short
    // away rule, which the simulator must see.
    assert!(
        missing.wrongful.len() > answering.wrongful.len(),
        "{} wrongful when nobody answers, {} when they do",
        missing.wrongful.len(),
        answering.wrongful.len()
    );
    assert!(
        missing
            .wrongful
            .iter()
            .all(|w| w.why.contains("at the screen")),
        "{:#?}",
        missing.wrongful
    );
}

#[tokio::test]
async fn under_a_peers_policy_only_the_peers_rule_reclaims() {
    // Kubeflow's culler waits a day: within one, nothing it judges ends, though our own away
    // rule and the inference person's chosen hour would have ended some.
    let personas = only(&[Kind::LaptopClosed, Kind::Inference], 1, 1);
    let kubeflow = month(&personas, Policy::Kubeflow).await;
    assert!(kubeflow.sessions.len() >= 2, "{:#?}", kubeflow.sessions);
    assert!(
        kubeflow
            .sessions
            .iter()
            .all(|s| matches!(s.how, Some(Ended::Timer | Ended::Person))),
        "{:#?}",
        kubeflow.sessions
    );
    let ours = month(&personas, Policy::Ours).await;
    assert!(ours.reclaims > 0, "{:#?}", ours.sessions);
}

#[tokio::test]
async fn the_simulated_ledger_balances_to_the_credit() {
    let personas = only(&[Kind::Extender, Kind::Crowd, Kind::OvernightTab], 3, 1);
    for policy in [Policy::Ours, Policy::Coder] {
        let outcome = month(&personas, policy).await;
        assert!(outcome.charged_milli > 0);
        assert!(
            outcome.sessions.iter().all(|s| s.ended.is_some()),
            "every session ended"
        );
        assert!(
            outcome.ledger_balances(),
            "{}: the ledger against the simulator's minutes: {:?}",
            policy.name(),
            outcome.balances
        );
    }
}

#[tokio::test]
async fn under_pressure_idle_sessions_end_sooner_and_running_jobs_still_never() {
    // One card of six slices. Three people come at 8:00 and leave their tabs open half an hour
    // later; six come at 9:00 and wait for slices; two fine-tunes run through the morning.
    let mut personas = only(&[Kind::Crowd, Kind::FineTune, Kind::OvernightTab], 1, 2);
    personas.pool.cards = 1;
    for p in &mut personas.persona {
        p.count = match p.kind {
            Kind::Crowd => 6,
            Kind::OvernightTab => 3,
            _ => 2,
        };
        if p.kind == Kind::OvernightTab {
            p.arrive_h = [8.0, 8.2];
            p.work_h = [0.5, 0.6];
        }
    }
    // Parking off: with it the tabs' slices go back after five minutes, and nobody waits.
    let sooner = month_with(&personas, Policy::OursSooner, |c| {
        c.idle.park_after_seconds = 0
    })
    .await;
    assert!(sooner.wait(1.0) > 0, "launches waited");
    let ended_sooner = sooner
        .sessions
        .iter()
        .filter(|s| s.detail.as_deref().is_some_and(|d| d.contains("sooner")))
        .count();
    assert!(ended_sooner > 0, "{:#?}", sooner.sessions);
    assert!(sooner.wrongful.is_empty(), "{:#?}", sooner.wrongful);
    assert!(sooner.ledger_balances());
}

/// Parking gives back the slice of a quiet session within the park time and a pass, ends
/// nobody's work (the ends are those of the same month without it), and a person or script
/// coming back gets theirs again at once while slots are free. Without a GPU checkpoint, an
/// editor holding GPU memory (the model server's) is never parked.
#[tokio::test]
async fn parking_gives_quiet_slices_back_and_takes_no_ones_work() {
    let personas = only(
        &[Kind::Interactive, Kind::OvernightTab, Kind::Inference],
        1,
        2,
    );
    let park_min = (server::config::idle::DEFAULT_PARK_AFTER_SECONDS / 60) as u32;
    let plain = month(&personas, Policy::OursNoParking).await;
    let parking = month(&personas, Policy::OursCheckpoint).await;
    assert!(parking.parks > 0 && parking.resumes > 0, "{parking:#?}");
    assert_eq!(
        parking.waited_for_gpu_min, 0,
        "slots were free: nobody waits"
    );
    assert!(
        parking.idle_min * 2 < plain.idle_min,
        "{} idle minutes parking, {} without",
        parking.idle_min,
        plain.idle_min
    );
    let ends = |o: &run::Outcome| {
        o.sessions
            .iter()
            .map(|s| (s.user.clone(), s.requested, s.how))
            .collect::<Vec<_>>()
    };
    assert_eq!(ends(&parking), ends(&plain), "parking ends nothing");
    assert_eq!(parking.wrongful.len(), plain.wrongful.len());
    assert!(parking.ledger_balances(), "{:?}", parking.balances);
    for s in parking
        .sessions
        .iter()
        .filter(|s| s.persona == "overnight_tab")
    {
        assert!(s.idle_min <= park_min + 1, "{s:?}");
        assert!(s.parked_min > 0, "{s:?}");
    }
    let memory = |o: &run::Outcome| -> u32 {
        o.sessions
            .iter()
            .filter(|s| s.persona == "inference")
            .map(|s| s.parked_min)
            .sum()
    };
    let no_checkpoint = month(&personas, Policy::Ours).await;
    assert!(memory(&parking) > 0);
    assert_eq!(memory(&no_checkpoint), 0, "its model holds GPU memory");
}
