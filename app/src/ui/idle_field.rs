//! The launch form's idle timeout: the person's own, within the bounds an admin set for the
//! size ([`TimeoutChoice`]). Read at submit, not bound to a signal, so the dashboard's bundle
//! stays within its budget (BENCHMARKS.md, section 11). The submit checks it by the same rule
//! the server does ([`TimeoutChoice::choose`]) and the form says what is wrong before anything is
//! sent; the server checks it again, as it does every launch.

use crate::domain::idle::TimeoutChoice;
use leptos::prelude::*;

/// The field, and what is wrong with what was typed, once a submit found it.
#[derive(Clone, Copy, Default)]
pub struct IdleField {
    input: NodeRef<leptos::html::Input>,
    refused: RwSignal<Option<String>>,
}

impl IdleField {
    /// The minutes typed; `None` when empty, or when the size offers no choice: its default.
    /// Text that is no number reads as 0, which no bounds allow, so it is refused with the
    /// bounds rather than launched with the default.
    fn minutes(self) -> Option<u32> {
        let input = self
            .input
            .get_untracked()
            .filter(|input| !input.disabled())?;
        let text = input.value();
        let text = text.trim();
        (!text.is_empty()).then(|| text.parse().unwrap_or(0))
    }

    /// Why the last submit refused what was typed, until it is typed anew: the form says it
    /// where it says why it cannot launch.
    pub fn refused(self) -> Option<String> {
        self.refused.get()
    }

    /// The minutes to send for a launch of a size that allows `choice`, or, outside its bounds,
    /// `None` with the reason kept for [`IdleField::refused`].
    pub fn checked(self, choice: TimeoutChoice) -> Option<Option<u32>> {
        let minutes = self.minutes();
        let verdict = choice.choose(minutes);
        let refused = verdict
            .as_ref()
            .err()
            .map(|why| super::format::sentence(why));
        let ok = refused.is_none();
        self.refused.set(refused);
        ok.then_some(minutes)
    }

    /// The field, and the bounds of the size chosen now.
    pub fn view(
        self,
        choice: impl Fn() -> TimeoutChoice + Copy + Send + Sync + 'static,
    ) -> impl IntoView {
        let refused = self.refused;
        view! {
            <label class="duration">
                "Idle timeout (minutes)"
                <input
                    type="text"
                    name="idle_minutes"
                    inputmode="numeric"
                    autocomplete="off"
                    data-testid="idle-minutes"
                    node_ref=self.input
                    placeholder=move || choice().default_minutes.to_string()
                    disabled=move || !choice().open()
                    aria-invalid=move || refused.with(Option::is_some).to_string()
                    on:input=move |_| refused.set(None)
                />
                <small class="muted">{move || choice().words()}</small>
            </label>
        }
    }
}
