//! A secret shown once, with a Copy button: the clipboard where the page may write to it (a
//! secure origin), else the text selected for the person to copy by hand.

use leptos::prelude::*;

/// What pressing Copy came to (only the browser's page presses it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
enum Copied {
    Not,
    Done,
    /// No clipboard here (a plain-http origin), or it refused: the text is selected instead.
    ByHand,
}

/// The secret in a read-only field, and a button that copies it. `label` names the field.
#[component]
pub(crate) fn SecretField(
    secret: String,
    label: String,
    /// The field's test id.
    #[prop(into)]
    test_id: String,
) -> impl IntoView {
    let copied = RwSignal::new(Copied::Not);
    let field = NodeRef::<leptos::html::Input>::new();
    let text = secret.clone();
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        write_clipboard(&text, field, copied);
        #[cfg(not(feature = "hydrate"))]
        let _ = (&text, field, copied);
    };
    view! {
        <span class="secret-field">
            <input
                class="secret"
                readonly
                value=secret
                aria-label=label.clone()
                data-testid=test_id
                node_ref=field
                on:focus=move |_| select(field)
            />
            <button type="button" on:click=copy aria-label=format!("Copy {}", label.to_lowercase())>
                "Copy"
            </button>
            <span class="muted" role="status">
                {move || match copied.get() {
                    Copied::Not => "",
                    Copied::Done => "Copied.",
                    Copied::ByHand => "Selected: copy it with Ctrl+C.",
                }}
            </span>
        </span>
    }
}

fn select(field: NodeRef<leptos::html::Input>) {
    if let Some(input) = field.get_untracked() {
        input.select();
    }
}

/// `navigator.clipboard.writeText`, reached by name: the page's web-sys has no Clipboard.
#[cfg(feature = "hydrate")]
fn write_clipboard(text: &str, field: NodeRef<leptos::html::Input>, copied: RwSignal<Copied>) {
    use js_sys::{Function, Promise, Reflect};
    use wasm_bindgen::JsCast;
    use wasm_bindgen::prelude::Closure;
    let get = |on: &wasm_bindgen::JsValue, key: &str| {
        Reflect::get(on, &key.into())
            .ok()
            .filter(|v| !v.is_undefined() && !v.is_null())
    };
    let clipboard = get(&js_sys::global(), "navigator").and_then(|n| get(&n, "clipboard"));
    let promise = clipboard.and_then(|clipboard| {
        let write = get(&clipboard, "writeText")?.dyn_into::<Function>().ok()?;
        write
            .call1(&clipboard, &text.into())
            .ok()?
            .dyn_into::<Promise>()
            .ok()
    });
    let by_hand = move || {
        select(field);
        copied.set(Copied::ByHand);
    };
    let Some(promise) = promise else {
        by_hand();
        return;
    };
    let done = Closure::once(move |_: wasm_bindgen::JsValue| copied.set(Copied::Done));
    let failed = Closure::once(move |_: wasm_bindgen::JsValue| by_hand());
    let _ = promise.then2(&done, &failed);
    done.forget();
    failed.forget();
}
