//! The small coloured labels that say where a session or a promotion stands.

#[cfg(feature = "ssr")]
use crate::domain::hold::SliceHold;
use crate::domain::promotion::PromotionState;
use crate::domain::session::SessionState;
use leptos::prelude::*;

#[component]
pub(crate) fn StateChip(state: SessionState) -> impl IntoView {
    view! {
        <span class=format!("chip state-{}", state.as_str()) data-testid="state-chip">
            {state.as_str()}
        </span>
    }
}

/// What a promotion's state means to the person who asked for it.
pub(crate) fn state_label(state: PromotionState) -> &'static str {
    match state {
        PromotionState::Pending => "waiting for approval",
        PromotionState::Approved => "approved, about to be pushed",
        PromotionState::Pushing => "pushing",
        PromotionState::Pushed => "in the registry",
        PromotionState::Rejected => "rejected",
        PromotionState::Failed => "push failed",
    }
}

#[component]
pub(crate) fn PromotionChip(state: PromotionState) -> impl IntoView {
    view! {
        <span class=format!("chip promotion-{}", state.as_str()) data-testid="promotion-state">
            {state_label(state)}
        </span>
    }
}

/// "hard limit", "soft limit", "no limit": how a slice holds, the sentence behind it in its
/// title. Drawn by the server only (the pool strip and the admins' pool).
#[cfg(feature = "ssr")]
#[component]
pub(crate) fn HoldChip(hold: SliceHold) -> impl IntoView {
    let class = match hold {
        SliceHold::Hard => "chip ok",
        SliceHold::Soft => "chip hold-soft",
        SliceHold::None => "chip warn",
    };
    view! {
        <span class=class title=hold.explain() data-testid="slice-hold" data-hold=hold.word()>
            {hold.label()}
        </span>
    }
}
