//! Adding accounts: one by one, or many from a CSV file, checked first and applied whole.

use super::*;

/// A new local account: its name, whether an admin, and a password (or one the server makes).
#[component]
pub(super) fn AddUserForm(add: ServerAction<AddUser>) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let admin = RwSignal::new(false);
    Effect::new(move |_| {
        if let Some(Ok(_)) = add.value().get() {
            name.set(String::new());
            password.set(String::new());
            admin.set(false);
        }
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let typed = password.get_untracked();
        add.dispatch(AddUser {
            account: NewAccount {
                name: name.get_untracked(),
                role: if admin.get_untracked() {
                    Role::Admin
                } else {
                    Role::User
                },
                password: (!typed.is_empty()).then_some(typed),
            },
        });
    };
    view! {
        <details class="add-user" data-testid="add-user">
            <summary>"Add a user"</summary>
            <form on:submit=submit>
                <label>
                    "Name"
                    <input required maxlength="64" autocomplete="off" bind:value=name />
                </label>
                <label>
                    "Password"
                    <input
                        type="text"
                        autocomplete="off"
                        placeholder="leave empty to make one"
                        bind:value=password
                    />
                </label>
                <label class="inline">
                    <input type="checkbox" bind:checked=admin />
                    "admin"
                </label>
                <button type="submit" class="primary" disabled=move || add.pending().get()>
                    "Add user"
                </button>
                <p class="muted">
                    "The password is shown once, for you to hand over; its person chooses their own at their first sign-in."
                </p>
            </form>
        </details>
    }
}

/// A file of accounts: chosen or pasted, checked (every bad line named), then applied whole.
#[component]
pub(super) fn BulkForm(check: BulkAction, apply: BulkAction) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let open = RwSignal::new(false);
    // A file applied empties the form; what it planned is done.
    Effect::new(move |_| {
        if let Some((_, Ok(_))) = apply.value().get() {
            text.set(String::new());
        }
    });
    let send_check = move || {
        let csv = text.get_untracked();
        if !csv.trim().is_empty() {
            check.dispatch(csv);
        }
    };
    let chosen = move |ev: leptos::ev::Event| {
        #[cfg(feature = "hydrate")]
        read_chosen_file(&ev, move |csv| {
            text.set(csv);
            send_check();
        });
        #[cfg(not(feature = "hydrate"))]
        let _ = ev;
    };
    // The plan of the text as it is now: a file edited after its check is checked again.
    let plan = move || {
        let (checked, answer) = check.value().get()?;
        (checked == text.get()).then_some(answer)
    };
    let result = move || {
        if check.pending().get() {
            return Some(
                view! { <p class="muted" role="status">"Checking the file…"</p> }.into_any(),
            );
        }
        Some(match plan()? {
            Err(error) => view! { <crate::ui::Refusal error /> }.into_any(),
            Ok(answer) if !answer.problems.is_empty() => view! {
                <div class="notice error" role="alert" data-testid="bulk-problems">
                    <p>"Nothing will be added or granted until every line is right:"</p>
                    <ul>
                        {answer
                            .problems
                            .iter()
                            .map(|p| view! { <li>{crate::ui::format::sentence(&p.to_string())}</li> })
                            .collect_view()}
                    </ul>
                </div>
            }
            .into_any(),
            Ok(answer) => {
                let csv = text.get_untracked();
                let button = apply_label(&answer);
                view! {
                    <div class="bulk-plan" data-testid="bulk-plan">
                        <p>{plan_words(&answer)}</p>
                        <ol>
                            {answer
                                .planned
                                .iter()
                                .map(|p| {
                                    view! {
                                        <li value=p.line.to_string()>
                                            {crate::ui::format::sentence(&p.words())}
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ol>
                        <button
                            type="button"
                            class="primary"
                            disabled=move || apply.pending().get()
                            on:click=move |_| {
                                apply.dispatch(csv.clone());
                            }
                        >
                            {button}
                        </button>
                    </div>
                }
                .into_any()
            }
        })
    };
    view! {
        <details
            class="bulk-users"
            data-testid="bulk-users"
            prop:open=move || open.get()
            on:toggle=move |ev| {
                #[cfg(feature = "hydrate")]
                {
                    use wasm_bindgen::JsCast;
                    if let Some(details) = ev
                        .target()
                        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
                    {
                        open.set(details.has_attribute("open"));
                    }
                }
                #[cfg(not(feature = "hydrate"))]
                let _ = ev;
            }
        >
            <summary>"Add or grant from a CSV file"</summary>
            <form on:submit=move |ev: leptos::ev::SubmitEvent| {
                ev.prevent_default();
                send_check();
            }>
                <label>
                    "CSV file"
                    <input type="file" accept=".csv,text/csv,text/plain" on:change=chosen />
                </label>
                <label class="grow">
                    "or its lines"
                    <textarea
                        name="csv"
                        rows="4"
                        spellcheck="false"
                        placeholder="name,role,credits,note"
                        bind:value=text
                    ></textarea>
                </label>
                <button type="submit">"Check"</button>
                <p class="muted">
                    "One line a person: name, then role (user or admin; empty for user), credits and a note, each optional. A new name is added with a password made for it; a name that exists is granted the credits. Nothing is done until every line is right."
                </p>
            </form>
            {result}
        </details>
    }
}

/// Reads the file an `<input type=file>` was given, as text, and hands it to `then`.
#[cfg(feature = "hydrate")]
pub(super) fn read_chosen_file(ev: &leptos::ev::Event, then: impl FnOnce(String) + 'static) {
    use js_sys::{Function, Promise, Reflect};
    use wasm_bindgen::{JsCast, JsValue, closure::Closure};
    let Some(input) = ev.target() else { return };
    let file = Reflect::get(&input, &JsValue::from_str("files"))
        .and_then(|files| Reflect::get(&files, &JsValue::from(0)));
    let Ok(file) = file else { return };
    if file.is_undefined() || file.is_null() {
        return;
    }
    let read = Reflect::get(&file, &JsValue::from_str("text"))
        .ok()
        .and_then(|text| text.dyn_into::<Function>().ok())
        .and_then(|text| text.call0(&file).ok())
        .and_then(|promise| promise.dyn_into::<Promise>().ok());
    if let Some(read) = read {
        // A closure freed once called, handed to the promise's `then`.
        let done = Closure::once_into_js(move |text: JsValue| {
            then(text.as_string().unwrap_or_default());
        });
        let on = Reflect::get(&read, &JsValue::from_str("then"))
            .ok()
            .and_then(|on| on.dyn_into::<Function>().ok());
        if let Some(on) = on {
            let _ = on.call1(&read, &done);
        }
    }
    // The same file chosen again is a change again.
    let _ = Reflect::set(&input, &JsValue::from_str("value"), &JsValue::from_str(""));
}

/// "3 lines: 2 accounts to add, 1 grant."
pub(super) fn plan_words(answer: &BulkUsers) -> String {
    let (adds, grants) = counts(answer);
    let lines = match answer.planned.len() {
        1 => "1 line".to_string(),
        n => format!("{n} lines"),
    };
    let adds = match adds {
        0 => None,
        1 => Some("1 account to add".to_string()),
        n => Some(format!("{n} accounts to add")),
    };
    let grants = match grants {
        0 => None,
        1 => Some("1 grant".to_string()),
        n => Some(format!("{n} grants")),
    };
    let parts: Vec<String> = adds.into_iter().chain(grants).collect();
    format!("{lines}: {}.", parts.join(", "))
}

/// The apply button's words: "Add 2 and grant 1".
pub(super) fn apply_label(answer: &BulkUsers) -> String {
    match counts(answer) {
        (0, grants) => format!("Grant {grants}"),
        (adds, 0) => format!("Add {adds}"),
        (adds, grants) => format!("Add {adds} and grant {grants}"),
    }
}

/// What applying a file came to.
pub(super) fn applied_words(done: &BulkUsers) -> String {
    let (adds, grants) = counts(done);
    let added = match adds {
        0 => None,
        1 => Some("added 1 account".to_string()),
        n => Some(format!("added {n} accounts")),
    };
    let granted = match grants {
        0 => None,
        1 => Some("made 1 grant".to_string()),
        n => Some(format!("made {n} grants")),
    };
    let done_words: Vec<String> = added.into_iter().chain(granted).collect();
    let passwords = if adds > 0 {
        "; the new passwords are below, shown only now"
    } else {
        ""
    };
    crate::ui::format::sentence(&format!(
        "From the file: {}{passwords}.",
        done_words.join(" and ")
    ))
}

/// (accounts added, grants made) of a file's plan.
pub(super) fn counts(answer: &BulkUsers) -> (usize, usize) {
    let adds = answer
        .planned
        .iter()
        .filter(|p| matches!(p.action, bulk::Action::Add { .. }))
        .count();
    (adds, answer.planned.len() - adds)
}

/// The passwords of the accounts a file added, shown this once.
#[component]
pub(super) fn MadePasswordsNotice(made: Vec<MadePassword>) -> impl IntoView {
    view! {
        <div class="notice" role="status" data-testid="made-passwords">
            <p>"Their passwords, shown only now:"</p>
            <ul class="made-passwords">
                {made
                    .into_iter()
                    .map(|made| {
                        view! {
                            <li>
                                <span>{made.name.clone()}</span>
                                <crate::ui::copy::SecretField
                                    secret=made.password
                                    label=format!("Password of {}", made.name)
                                    test_id="made-passwords-value"
                                />
                            </li>
                        }
                    })
                    .collect_view()}
            </ul>
            <p class="muted">
                "Hand each over in person or by a private message. They choose their own at their next sign-in."
            </p>
        </div>
    }
}

/// A password an admin set, shown this once.
#[component]
pub(super) fn MadePasswordNotice(made: MadePassword) -> impl IntoView {
    view! {
        <div class="notice" role="status" data-testid="made-password">
            <p>{format!("{}'s password, shown only now:", made.name)}</p>
            <crate::ui::copy::SecretField
                secret=made.password
                label=format!("Password of {}", made.name)
                test_id="made-password-value"
            />
            <p class="muted">
                "Hand it over in person or by a private message. They choose their own at their next sign-in."
            </p>
        </div>
    }
}
