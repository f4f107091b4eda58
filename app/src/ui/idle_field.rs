//! The launch form's idle timeout: the person's own, within the bounds an admin set for the
//! size ([`TimeoutChoice`](crate::domain::idle::TimeoutChoice)). Read at submit, not bound to a signal, so the dashboard's bundle
//! stays within its budget (BENCHMARKS.md, section 12); the server says what is wrong with a
//! choice, naming the bounds, as it does for any refused launch.

use crate::model::SliceOption;
use leptos::prelude::*;

/// The field; [`IdleField::minutes`] reads it when the form is sent.
#[derive(Clone, Copy, Default)]
pub struct IdleField(NodeRef<leptos::html::Input>);

impl IdleField {
    /// The minutes typed; `None` when empty, or when the size offers no choice: its default.
    /// Text that is no number is sent as 0, which no bounds allow, so the server refuses it
    /// with the bounds rather than launch with the default.
    pub fn minutes(self) -> Option<u32> {
        let input = self.0.get_untracked().filter(|input| !input.disabled())?;
        let text = input.value();
        let text = text.trim();
        (!text.is_empty()).then(|| text.parse().unwrap_or(0))
    }

    /// The field, and the bounds of the size chosen now (`slice`, among `slices`).
    pub fn view(self, slices: Memo<Vec<SliceOption>>, slice: Memo<u64>) -> impl IntoView {
        // A plain closure, not a memo: a memo of its own type would cost the page's bundle more
        // than reading the few sizes again.
        let choice = move || {
            let mib = slice.get();
            slices.with(|slices| {
                slices
                    .iter()
                    .find(|s| s.slice_mib == mib)
                    .map(|s| s.idle_choice)
                    .unwrap_or_default()
            })
        };
        view! {
            <label class="duration">
                "Idle timeout (minutes)"
                <input
                    type="text"
                    name="idle_minutes"
                    inputmode="numeric"
                    autocomplete="off"
                    data-testid="idle-minutes"
                    node_ref=self.0
                    placeholder=move || choice().default_minutes.to_string()
                    disabled=move || !choice().open()
                />
                <small class="muted">{move || choice().words()}</small>
            </label>
        }
    }
}
