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
}
