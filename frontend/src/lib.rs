//! The browser bundle: hydrates the server-rendered pages.
#![recursion_limit = "512"]

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
}
