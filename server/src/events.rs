//! Live steps per session, for the progress stream. The database keeps the history;
//! this only carries what happens while someone watches.

use app::model::Step;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::broadcast;

#[derive(Default)]
pub struct EventHub {
    channels: Mutex<HashMap<String, broadcast::Sender<Step>>>,
}

impl EventHub {
    pub fn subscribe(&self, session_id: &str) -> broadcast::Receiver<Step> {
        let mut channels = self.channels.lock().expect("event hub");
        channels
            .entry(session_id.to_string())
            .or_insert_with(|| broadcast::channel(64).0)
            .subscribe()
    }

    pub fn publish(&self, session_id: &str, step: Step) {
        let ended = step.state == app::domain::session::SessionState::Ended;
        let mut channels = self.channels.lock().expect("event hub");
        if let Some(sender) = channels.get(session_id) {
            let _ = sender.send(step);
        }
        if ended {
            channels.remove(session_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::domain::session::SessionState;

    fn step(seq: i64, state: SessionState) -> Step {
        Step {
            seq,
            at_ms: 0,
            state,
            message: String::new(),
            progress: 0,
            failed: false,
        }
    }

    #[tokio::test]
    async fn subscribers_get_steps_until_the_end() {
        let hub = EventHub::default();
        let mut rx = hub.subscribe("s1");
        hub.publish("s1", step(1, SessionState::Starting));
        hub.publish("s2", step(1, SessionState::Starting));
        hub.publish("s1", step(2, SessionState::Ended));
        assert_eq!(rx.recv().await.unwrap().seq, 1);
        assert_eq!(rx.recv().await.unwrap().state, SessionState::Ended);
        // The channel is dropped after the end.
        assert!(rx.recv().await.is_err());
    }
}
