//! The browser's end of the launch progress stream (server-sent events).

use crate::model::Step;
use send_wrapper::SendWrapper;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::Closure;

/// An open stream; closing it stops the updates.
pub struct Follow(SendWrapper<web_sys::EventSource>);

impl Follow {
    pub fn close(&self) {
        self.0.close();
    }
}

/// Follows a session's steps until it ends or the stream is closed.
pub fn follow(id: &str, on_step: impl Fn(Step) + 'static) -> Follow {
    let url = format!("/api/v1/sessions/{id}/events");
    let source = web_sys::EventSource::new(&url).expect("EventSource is supported");
    let closer = source.clone();
    let on_step = std::rc::Rc::new(on_step);
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
            let Some(text) = ev.data().as_string() else {
                return;
            };
            // Read as bytes, as the page's other JSON is: one reader in the bundle.
            if let Ok(step) = serde_json::from_slice::<Step>(text.as_bytes()) {
                let ended = step.state == crate::domain::session::SessionState::Ended;
                let on_step = on_step.clone();
                super::hydration::after_hydration(move || on_step(step));
                if ended {
                    closer.close();
                }
            }
        });
    source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    on_message.forget();
    Follow(SendWrapper::new(source))
}
