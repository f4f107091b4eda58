//! Asking an admin for credits from the dashboard: one open ask at a time, answered by a grant
//! (which closes it) or declined; the user may withdraw it.

use crate::api::{AskForCredits, WithdrawCreditRequest};
use crate::domain::credits;
use crate::model::CreditsView;
use crate::ui::format::{local_time, submitted};
use leptos::prelude::*;
use leptos::server_fn::ServerFn;

#[component]
pub(super) fn AskForCreditsCard(credits_now: RwSignal<CreditsView>) -> impl IntoView {
    let ask = ServerAction::<AskForCredits>::new();
    // The dashboard's reloads carry the ask too: a grant elsewhere closes it here. Once asked,
    // the form gives way to the open ask; refused, it keeps what was typed (the browser's own
    // fields, read at the submit).
    Effect::new(move |_| {
        if let Some(Ok(request)) = ask.value().get() {
            credits_now.update(|c| c.request = Some(request));
        }
    });
    let refused = move || {
        ask.value()
            .get()
            .and_then(Result::err)
            .map(|error| view! { <crate::ui::Refusal error /> })
    };
    let open = move || credits_now.get().request;
    view! {
        <section class="card" aria-labelledby="ask-title" data-testid="ask-credits">
            <h2 id="ask-title">"Need more credits?"</h2>
            {move || match open() {
                Some(request) => view! {
                    <p data-testid="open-ask">
                        {format!("You asked for {} on ", credits::with_unit(request.amount))}
                        {local_time(request.at_ms)}
                        {format!(
                            "{}. Admins see it on their Users page; a grant answers it.",
                            if request.note.is_empty() {
                                String::new()
                            } else {
                                format!(" (\u{201c}{}\u{201d})", request.note)
                            },
                        )}
                    </p>
                    // A plain form: the server withdraws it and the dashboard loads anew.
                    <form method="post" action=WithdrawCreditRequest::PATH class="inline">
                        <button type="submit">"Withdraw the ask"</button>
                    </form>
                }
                .into_any(),
                None => view! {
                    <form
                        class="ask-form"
                        on:submit=move |ev: leptos::ev::SubmitEvent| {
                            ev.prevent_default();
                            ask.dispatch(AskForCredits {
                                amount: submitted(&ev, "amount"),
                                note: submitted(&ev, "note"),
                            });
                        }
                    >
                        <label>
                            "Credits"
                            <input
                                name="amount"
                                inputmode="decimal"
                                required
                                size="6"
                                placeholder="e.g. 20"
                            />
                        </label>
                        <label>
                            "What for"
                            <input
                                name="note"
                                maxlength="200"
                                placeholder="fine-tuning for the course project"
                            />
                        </label>
                        <button type="submit" disabled=move || ask.pending().get()>
                            "Ask an admin"
                        </button>
                    </form>
                }
                .into_any(),
            }}
            {refused}
        </section>
    }
}
