//! Whether the page has hydrated. Changes that come from outside the page's own code (a
//! stream's message, a reload's answer) wait for it: a signal changed while the page is being
//! hydrated renders its part anew against a DOM that still shows the server's version, and
//! hydration then fails. With the pages split into chunks hydration waits for the page's chunk,
//! so such a change could arrive in the middle of it.

use std::cell::{Cell, RefCell};

thread_local! {
    static DONE: Cell<bool> = const { Cell::new(false) };
    static WAITING: RefCell<Vec<Box<dyn FnOnce()>>> = RefCell::new(Vec::new());
}

/// Runs `change` now once the page has hydrated, or as soon as it has.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub fn after_hydration(change: impl FnOnce() + 'static) {
    if DONE.with(Cell::get) {
        change();
    } else {
        WAITING.with(|w| w.borrow_mut().push(Box::new(change)));
    }
}

/// Called by the browser's entry point once hydration is complete: runs what waited for it.
pub fn hydration_done() {
    DONE.with(|d| d.set(true));
    let waiting = WAITING.with(|w| std::mem::take(&mut *w.borrow_mut()));
    for change in waiting {
        change();
    }
}

/// The encoding of a page's data from the server's render to the browser: JSON, read as bytes
/// the way the server functions' answers are read (`JsonSerdeCodec` reads it as a `str`). Each
/// type then has one JSON reader in the bundle, shared by hydration and the page's reloads,
/// rather than one for each.
pub struct PageJson;

impl<T: serde::Serialize> leptos::server::codee::Encoder<T> for PageJson {
    type Error = serde_json::Error;
    type Encoded = String;

    fn encode(value: &T) -> Result<String, Self::Error> {
        serde_json::to_string(value)
    }
}

impl<T: serde::de::DeserializeOwned> leptos::server::codee::Decoder<T> for PageJson {
    type Error = serde_json::Error;
    type Encoded = str;

    fn decode(text: &str) -> Result<T, Self::Error> {
        serde_json::from_slice(text.as_bytes())
    }
}

/// A resource of the page's data in [`PageJson`]: `Resource::new` of leptos, but for the reader.
#[track_caller]
pub fn page_resource<S, T, Fut>(
    source: impl Fn() -> S + Send + Sync + 'static,
    fetcher: impl Fn(S) -> Fut + Send + Sync + 'static,
) -> leptos::prelude::Resource<T, PageJson>
where
    S: Send + Sync + Clone + PartialEq + 'static,
    T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    leptos::prelude::Resource::new_with_options(source, fetcher, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn changes_wait_for_hydration_and_then_run_in_order() {
        let seen = Rc::new(RefCell::new(Vec::new()));
        for n in [1, 2] {
            let seen = seen.clone();
            after_hydration(move || seen.borrow_mut().push(n));
        }
        assert!(seen.borrow().is_empty(), "nothing runs before hydration");
        hydration_done();
        assert_eq!(*seen.borrow(), [1, 2]);
        let later = seen.clone();
        after_hydration(move || later.borrow_mut().push(3));
        assert_eq!(*seen.borrow(), [1, 2, 3], "after it, at once");
    }

    #[test]
    fn page_data_comes_back_as_it_was_sent() {
        use leptos::server::codee::{Decoder, Encoder};
        let sent: Vec<(String, Option<i64>)> =
            vec![("caf\u{e9} \"quoted\"".into(), Some(-3)), ("".into(), None)];
        let text = <PageJson as Encoder<_>>::encode(&sent).unwrap();
        let back: Vec<(String, Option<i64>)> = <PageJson as Decoder<_>>::decode(&text).unwrap();
        assert_eq!(back, sent);
        assert!(
            <PageJson as Decoder<Vec<i64>>>::decode("[1,").is_err(),
            "broken text is an error"
        );
    }
}
