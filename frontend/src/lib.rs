//! The browser bundle: hydrates the server-rendered pages.
#![recursion_limit = "512"]

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
    // Buttons work from here on: browser tests wait for this before they type or click.
    if let Some(body) = leptos::prelude::document().body() {
        let _ = body.set_attribute("data-hydrated", "");
    }
}
