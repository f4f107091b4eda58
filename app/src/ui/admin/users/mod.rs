//! The users tab: add, reset and delete accounts, roles, locks, credits and quotas, with what
//! was typed kept across reloads. What loses something asks first.
//!
//! Made for a hundred users and more: a row is one line (the grant at hand, every other action
//! in the row's menu), and a CSV file adds and grants to many at once (`crate::domain::bulk`):
//! checked first, every bad line named by its number, then applied whole or not at all.

use super::Tab;
use super::table::{Empty, Outcome, Pager, SearchForm, SortHeader, loaded};
use crate::api::{
    AddUser, ChangeUser, GrantCredits, ResetPassword, SetUserQuota, admin_users, bulk_users,
    change_user, decline_credit_request, delete_user, grant_credits, set_user_quota, undelete_user,
};
use crate::domain::bulk;
use crate::domain::credits;
use crate::domain::listing::{ListQuery, Page};
use crate::domain::pool::format_mib;
use crate::error::AppError;
use crate::model::{AdminUser, BulkUsers, MadePassword, NewAccount, Role, UserChange};
use crate::ui::format::{confirmed, format_utc, local_time};
use crate::ui::hydration::page_resource;
use leptos::prelude::*;
use std::collections::HashMap;

mod adding;
mod row;

use adding::*;
use row::*;

#[component]
pub(super) fn UsersTab(list: Memo<ListQuery>) -> impl IntoView {
    let add = ServerAction::<AddUser>::new();
    let reset = ServerAction::<ResetPassword>::new();
    // Each carries the words its success is told in, fixed when it was sent: the answers to
    // several rows may come back in any order.
    let change: ChangeAction = Action::new(|(said, input): &(String, ChangeUser)| {
        let (said, ChangeUser { user_id, change }) = (said.clone(), input.clone());
        async move { change_user(user_id, change).await.map(|()| said) }
    });
    let delete: ChangeAction = Action::new(|(said, input): &(String, ChangeUser)| {
        let (said, user_id) = (said.clone(), input.user_id.clone());
        async move { delete_user(user_id).await.map(|()| said) }
    });
    let decline: ChangeAction = Action::new(|(said, input): &(String, ChangeUser)| {
        let (said, user_id) = (said.clone(), input.user_id.clone());
        async move { decline_credit_request(user_id).await.map(|()| said) }
    });
    let undelete: ChangeAction = Action::new(|(said, input): &(String, ChangeUser)| {
        let (said, user_id) = (said.clone(), input.user_id.clone());
        async move { undelete_user(user_id).await.map(|()| said) }
    });
    let accounts = Accounts {
        reset,
        delete,
        decline,
        undelete,
    };
    // The last password an admin set here, from an add or a reset, whichever answered last.
    let made = RwSignal::new(None::<MadePassword>);
    Effect::new(move |_| {
        if let Some(Ok(new)) = add.value().get() {
            made.set(Some(new));
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(new)) = reset.value().get() {
            made.set(Some(new));
        }
    });
    // Their answers name the user, so that a row's draft follows its own answer.
    let grant: GrantAction = Action::new(|(name, input): &(String, GrantCredits)| {
        let name = name.clone();
        let GrantCredits {
            user_id,
            amount,
            note,
        } = input.clone();
        let asked = credits::parse(&amount).unwrap_or(0);
        async move {
            let answer = grant_credits(user_id.clone(), amount, note).await;
            (
                user_id,
                answer.map(|balance| granted(&name, asked, balance)),
            )
        }
    });
    let quota: QuotaAction = Action::new(|(name, input): &(String, SetUserQuota)| {
        let name = name.clone();
        let SetUserQuota { user_id, overrides } = input.clone();
        async move {
            let answer = set_user_quota(user_id.clone(), overrides).await;
            (user_id, answer.map(|limits| quota_saved(&name, &limits)))
        }
    });
    // A file's plan is checked before it is applied: (the text checked, its plan).
    let check: BulkAction = Action::new(|csv: &String| {
        let csv = csv.clone();
        async move { (csv.clone(), bulk_users(csv, false).await) }
    });
    let apply: BulkAction = Action::new(|csv: &String| {
        let csv = csv.clone();
        async move { (csv.clone(), bulk_users(csv, true).await) }
    });
    // The passwords of the accounts the last file added, shown until the next action.
    let made_many = RwSignal::new(None::<Vec<MadePassword>>);
    Effect::new(move |_| {
        if let Some((_, Ok(done))) = apply.value().get() {
            made_many.set(Some(done.passwords));
        }
    });
    let outcome = Outcome::new();
    outcome.follow(
        move || apply.pending().get(),
        move || {
            apply
                .value()
                .get()
                .map(|(_, answer)| answer.map(|done| applied_words(&done)))
        },
    );
    outcome.owns(made_many);
    outcome.follow(
        move || add.pending().get(),
        move || {
            add.value().get().map(|answer| {
                answer.map(|made| format!("Added {}; their password is below.", made.name))
            })
        },
    );
    outcome.follow(
        move || reset.pending().get(),
        move || {
            reset.value().get().map(|answer| {
                answer.map(|made| format!("{} has a new password; it is below.", made.name))
            })
        },
    );
    outcome.follow(move || change.pending().get(), move || change.value().get());
    outcome.follow(move || delete.pending().get(), move || delete.value().get());
    outcome.follow(
        move || undelete.pending().get(),
        move || undelete.value().get(),
    );
    outcome.follow(
        move || decline.pending().get(),
        move || decline.value().get(),
    );
    outcome.follow(
        move || grant.pending().get(),
        move || grant.value().get().map(|(_, answer)| answer),
    );
    outcome.follow(
        move || quota.pending().get(),
        move || quota.value().get().map(|(_, answer)| answer),
    );
    // A password made here is shown until the next action is sent, whatever it is.
    outcome.owns(made);
    // Reloaded after what succeeded only: a refused grant keeps what was typed in its row.
    let changed = RwSignal::new(0u32);
    let drafts = Drafts::new();
    Effect::new(move |_| {
        if let Some((user_id, Ok(_))) = quota.value().get() {
            drafts.saved(Saved::Quota, &user_id);
            changed.update(|n| *n += 1);
        }
    });
    // The tab's count of open asks follows what answers them.
    let asks = use_context::<super::AsksChanged>();
    let asks_changed = move || {
        if let Some(super::AsksChanged(asks)) = asks {
            asks.update(|n| *n += 1);
        }
    };
    Effect::new(move |_| {
        let succeeded = [
            matches!(change.value().get(), Some(Ok(_))),
            matches!(add.value().get(), Some(Ok(_))),
            matches!(reset.value().get(), Some(Ok(_))),
            matches!(delete.value().get(), Some(Ok(_))),
            matches!(decline.value().get(), Some(Ok(_))),
            matches!(apply.value().get(), Some((_, Ok(_)))),
            matches!(undelete.value().get(), Some(Ok(_))),
        ];
        if succeeded.contains(&true) {
            changed.update(|n| *n += 1);
        }
        if succeeded[3] || succeeded[4] || succeeded[5] {
            asks_changed();
        }
    });
    Effect::new(move |_| {
        if let Some((user_id, Ok(_))) = grant.value().get() {
            drafts.saved(Saved::Grant, &user_id);
            changed.update(|n| *n += 1);
            asks_changed();
        }
    });
    let data = page_resource(
        move || (list.get(), changed.get()),
        |(query, _)| admin_users(query),
    );
    view! {
        <SearchForm
            tab=Tab::Users
            list
            placeholder="Name"
            filters=&[
                ("all", "everyone"),
                ("asking", "asking for credits"),
                ("admin", "admins"),
                ("user", "users"),
                ("locked", "locked"),
                ("deleted", "deleted, storage kept"),
            ]
        />
        <div class="user-forms">
            <AddUserForm add />
            <BulkForm check apply />
        </div>
        {outcome.view()}
        {move || made.get().map(|made| view! { <MadePasswordNotice made /> })}
        {move || {
            made_many
                .get()
                .filter(|made| !made.is_empty())
                .map(|made| view! { <MadePasswordsNotice made /> })
        }}
        {loaded(
            data,
            "Loading users…",
            move |page| {
                view! { <UsersTable page list change grant quota drafts accounts /> }.into_any()
            },
        )}
    }
}

/// What a grant of `asked` milli-credits to `name` came to; a negative one takes back.
fn granted(name: &str, asked: i64, balance: i64) -> String {
    let now = format!("Their balance is now {}.", credits::with_unit(balance));
    if asked < 0 {
        format!(
            "Took back {} from {name}. {now}",
            credits::with_unit(-asked)
        )
    } else {
        format!("Granted {name} {}. {now}", credits::with_unit(asked))
    }
}

/// What saving `name`'s quota came to: the limits that now apply.
fn quota_saved(name: &str, limits: &crate::domain::quota::Limits) -> String {
    format!(
        "Saved {name}'s quota: {} at a time, {} of GPU, {} min a session.",
        match limits.max_sessions {
            1 => "1 session".to_string(),
            n => format!("{n} sessions"),
        },
        format_mib(limits.max_gpu_mib),
        limits.max_minutes
    )
}

/// The actions on a listed account itself.
#[derive(Clone, Copy)]
struct Accounts {
    reset: ServerAction<ResetPassword>,
    delete: ChangeAction,
    decline: ChangeAction,
    undelete: ChangeAction,
}

/// A file's text sent to be checked or applied; answers with the text it was sent.
type BulkAction = Action<String, (String, Result<BulkUsers, AppError>)>;
/// An action sent with its input and what its success will say.
type ChangeAction = Action<(String, ChangeUser), Result<String, AppError>>;
/// Sent with the user's name; answers with the user's id and what it came to.
type GrantAction = Action<(String, GrantCredits), (String, Result<String, AppError>)>;
type QuotaAction = Action<(String, SetUserQuota), (String, Result<String, AppError>)>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_typed_in_a_row_outlives_reloads_until_it_is_saved() {
        let owner = Owner::new();
        owner.with(|| {
            let drafts = Drafts::new();
            let quota_of = |draft: &Draft| {
                let quota = draft.quota.clone().expect("the quota fields");
                quota.fields.map(|f| f.get_untracked())
            };
            let mut overrides = crate::domain::quota::Overrides::default();
            let first = drafts.of("u1", &overrides);
            first.amount.set("7".into());
            first.note.set("for the course".into());
            assert_eq!(quota_of(&first), quota_texts(&overrides));
            first.quota.as_ref().unwrap().fields[0].set("3".into());

            // Another admin sets the minutes meanwhile: the reload shows them, but the typed
            // sessions stay, and so does the grant.
            overrides.max_minutes = Some(45);
            let again = drafts.of("u1", &overrides);
            assert_eq!(again.amount.get_untracked(), "7");
            assert_eq!(
                quota_of(&again),
                ["3", "", "", ""],
                "a changed form is kept whole"
            );
            let other = drafts.of("u2", &overrides);
            assert!(other.amount.get_untracked().is_empty());
            other.amount.set("5".into());

            // The grant for u1 is saved: its fields empty; the quota draft stays.
            drafts.saved(Saved::Grant, "u1");
            let after = drafts.of("u1", &overrides);
            assert_eq!(
                (after.amount.get_untracked(), after.note.get_untracked()),
                (String::new(), String::new())
            );
            assert_eq!(drafts.of("u2", &overrides).amount.get_untracked(), "5");
            assert_eq!(quota_of(&after)[0], "3");

            // Its quota is saved: the fields refill from the reloaded figures.
            overrides.max_sessions = Some(3);
            drafts.saved(Saved::Quota, "u1");
            assert_eq!(quota_of(&drafts.of("u1", &overrides)), ["3", "", "45", ""]);

            // Untouched fields follow the figures.
            overrides.max_gpu_mib = Some(8192);
            assert_eq!(quota_of(&drafts.of("u1", &overrides)), ["3", "8", "45", ""]);
        });
    }

    #[test]
    fn a_files_plan_and_its_outcome_count_adds_and_grants() {
        let planned = |action| bulk::Planned {
            line: 1,
            name: "ada".into(),
            action,
            credits: 1000,
            note: String::new(),
        };
        let add = bulk::Action::Add { admin: false };
        let mut answer = BulkUsers {
            planned: vec![planned(add), planned(add), planned(bulk::Action::Grant)],
            ..BulkUsers::default()
        };
        assert_eq!(plan_words(&answer), "3 lines: 2 accounts to add, 1 grant.");
        assert_eq!(apply_label(&answer), "Add 2 and grant 1");
        assert_eq!(
            applied_words(&answer),
            "From the file: added 2 accounts and made 1 grant; the new passwords are below, shown only now."
        );
        answer.planned.truncate(1);
        answer.planned[0].action = bulk::Action::Grant;
        assert_eq!(plan_words(&answer), "1 line: 1 grant.");
        assert_eq!(apply_label(&answer), "Grant 1");
        assert_eq!(applied_words(&answer), "From the file: made 1 grant.");
    }

    #[test]
    fn locking_and_deleting_say_what_is_lost() {
        assert!(!lock_question("ada", 0).contains("session"));
        assert!(lock_question("ada", 1).contains("Their running session ends"));
        assert!(delete_question("ada", 2).contains("Their 2 running sessions end"));
        assert!(delete_question("ada", 0).contains("grace period"));
    }

    #[test]
    fn quota_fields_read_as_overrides_and_empty_is_the_default() {
        let read = |f: [&str; 4]| read_overrides(f.map(str::to_string));
        let o = read(["3", "", " 120 ", ""]).unwrap();
        assert_eq!(
            (o.max_sessions, o.max_gpu_mib, o.max_minutes, o.max_disk_mib),
            (Some(3), None, Some(120), None)
        );
        let o = read(["", "12.5", "", "40"]).unwrap();
        assert_eq!(
            (o.max_gpu_mib, o.max_disk_mib),
            (Some(12_800), Some(40_960))
        );
        assert!(read(["-1", "", "", ""]).unwrap_err().contains("sessions"));
        assert!(read(["", "lots", "", ""]).unwrap_err().contains("GPU GB"));
        assert!(read(["", "", "", "-2"]).unwrap_err().contains("disk GB"));
        assert!(
            read(["", "", "99999999999", ""])
                .unwrap_err()
                .contains("too large")
        );
    }
}
