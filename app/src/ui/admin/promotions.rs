//! The promotions tab: files users asked to push to the registry, to approve, reject or retry.

use super::Tab;
use super::table::{Empty, Outcome, Pager, SearchForm, SortHeader, loaded};
use crate::api::{DecidePromotion, admin_promotions, my_promotions};
use crate::domain::listing::{ListQuery, Page};
use crate::domain::promotion::{Decision, PromotionState};
use crate::ui::chips::PromotionChip;
use crate::ui::format::{format_bytes, local_time};
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn PromotionsTab(list: Memo<ListQuery>) -> impl IntoView {
    let decide = ServerAction::<DecidePromotion>::new();
    let data = page_resource(
        move || (list.get(), decide.version().get()),
        |(query, _)| admin_promotions(query),
    );
    let outcome = Outcome::new();
    outcome.follow(
        move || decide.pending().get(),
        move || {
            decide.value().get().map(|answer| {
                answer.map(|p| {
                    format!(
                        "{}'s {}:{} is now {}.",
                        p.user_name,
                        p.repository,
                        p.tag,
                        p.state.as_str()
                    )
                })
            })
        },
    );
    // Said first, so that an empty list is not mistaken for nobody having asked yet.
    let setup = page_resource(|| (), |_| my_promotions());
    let off_notice = move || {
        setup.get().and_then(Result::ok).filter(|p| !p.enabled).map(|_| {
            view! {
                <p class="notice" data-testid="promotion-off">
                    "Promotion is off: set " <code>"promotion.registry"</code>
                    " in the configuration to let users push files from their workspace to a registry."
                </p>
            }
        })
    };
    view! {
        <Suspense fallback=|| ()>{off_notice}</Suspense>
        <SearchForm
            tab=Tab::Promotions
            list
            placeholder="User, artifact, tag or file"
            filters=&[
                ("all", "all promotions"),
                ("pending", "waiting for approval"),
                ("approved", "approved"),
                ("pushing", "pushing"),
                ("pushed", "pushed"),
                ("rejected", "rejected"),
                ("failed", "failed"),
            ]
        />
        {outcome.view()}
        {loaded(
            data,
            "Loading promotions…",
            move |page| view! { <PromotionsTable page list decide /> }.into_any(),
        )}
    }
}

#[component]
fn PromotionsTable(
    page: Page<crate::model::PromotionView>,
    list: Memo<ListQuery>,
    decide: ServerAction<DecidePromotion>,
) -> impl IntoView {
    let pages = page.pages();
    if page.items.is_empty() {
        return view! { <Empty tab=Tab::Promotions list page=page.page text="No promotion matches." /> }
            .into_any();
    }
    view! {
        <table class="admin-table" data-testid="admin-promotions">
            <thead>
                <tr>
                    <th>"User"</th>
                    <th>"File"</th>
                    <th>"As"</th>
                    <SortHeader tab=Tab::Promotions list key="requested" label="Requested" />
                    <th>"State"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>
                {page
                    .items
                    .into_iter()
                    .map(|promotion| view! { <PromotionRow promotion decide /> })
                    .collect_view()}
            </tbody>
        </table>
        <Pager tab=Tab::Promotions list page=page.page pages total=page.total />
    }
    .into_any()
}

#[component]
fn PromotionRow(
    promotion: crate::model::PromotionView,
    decide: ServerAction<DecidePromotion>,
) -> impl IntoView {
    let reason = RwSignal::new(String::new());
    let id = promotion.id.clone();
    let button = move |decision: Decision, label: &'static str, class: &'static str| {
        let id = id.clone();
        view! {
            <button
                class=class
                on:click=move |_| {
                    let text = reason.get_untracked();
                    decide.dispatch(DecidePromotion {
                        id: id.clone(),
                        decision,
                        reason: (!text.trim().is_empty()).then_some(text),
                    });
                }
            >
                {label}
            </button>
        }
    };
    let state = promotion.state;
    // Pending ones are approved, failed ones retried; either may be rejected.
    let first = match state {
        PromotionState::Pending => Some((Decision::Approve, "Approve")),
        PromotionState::Failed => Some((Decision::Retry, "Retry")),
        _ => None,
    };
    let actions = first.map(|(decision, label)| {
        view! {
            <div class="decide">
                {button(decision, label, "primary")}
                <input
                    aria-label="Reason to reject"
                    placeholder="Reason (optional)"
                    maxlength="500"
                    bind:value=reason
                />
                {button(Decision::Reject, "Reject", "danger")}
            </div>
        }
    });
    let detail = promotion
        .reference
        .clone()
        .or_else(|| promotion.message.clone())
        .unwrap_or_default();
    let provenance = format!(
        "session {} · {} · sha256 {}",
        promotion.session_id, promotion.image, promotion.sha256
    );
    view! {
        <tr data-promotion=promotion.id.clone()>
            <td>{promotion.user_name.clone()}</td>
            <td title=provenance>
                {format!(
                    "{} ({})",
                    promotion.path,
                    format_bytes(promotion.size_bytes),
                )}
            </td>
            <td>{format!("{}:{}", promotion.repository, promotion.tag)}</td>
            <td>{local_time(promotion.requested_at_ms)}</td>
            <td>
                <PromotionChip state />
                <div class="muted small">{detail}</div>
                {promotion
                    .decided_by
                    .clone()
                    .map(|admin| view! { <div class="muted small">{format!("by {admin}")}</div> })}
            </td>
            <td>{actions}</td>
        </tr>
    }
}
