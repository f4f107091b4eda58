//! The browser bundle: hydrates the server-rendered pages.
#![recursion_limit = "512"]

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    // Every page but sign-in is a lazy route (its own wasm chunk): hydration waits for the
    // page's chunk, so it runs as a task (what `leptos::mount::hydrate_lazy` does), and says
    // when it is done.
    _ = any_spawner::Executor::init_wasm_bindgen();
    leptos::task::spawn_local(async {
        let body = leptos::prelude::document()
            .body()
            .expect("a page has a body");
        let owner = leptos::mount::hydrate_from_async(body.clone(), app::App).await;
        owner.forget();
        app::hydration_done();
        // Buttons work from here on: browser tests wait for this before they type or click.
        let _ = body.set_attribute("data-hydrated", "");
    });
}

/// Room in the module's read-only data for the wasm splitter (`cargo leptos build --split`). It
/// lays each page's data out anew, with alignment padding, and when that comes out longer than
/// the linker's layout, by even a few bytes, it keeps every page's data in the main module: 25 KB
/// more gzip on every page (BENCHMARKS.md section 11). Nothing reads these bytes, so the splitter
/// puts them in no module; they only leave the linker's layout room to spare.
#[used]
static SPLIT_SLACK: [u8; 1024] = [0x5a; 1024];
