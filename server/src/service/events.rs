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
        let nobody_listens = match channels.get(session_id) {
            Some(sender) => sender.send(step).is_err(),
            None => false,
        };
        if ended || nobody_listens {
            channels.remove(session_id);
        }
    }

    /// Drops channels nobody listens to any more (streams closed by their browsers).
    pub fn sweep(&self) {
        self.channels
            .lock()
            .expect("event hub")
            .retain(|_, sender| sender.receiver_count() > 0);
    }

    pub fn channel_count(&self) -> usize {
        self.channels.lock().expect("event hub").len()
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
        assert_eq!(hub.channel_count(), 0);
    }

    #[test]
    fn abandoned_channels_are_swept() {
        let hub = EventHub::default();
        let kept = hub.subscribe("a");
        drop(hub.subscribe("b"));
        hub.sweep();
        assert_eq!(hub.channel_count(), 1);
        drop(kept);
        hub.publish("a", step(1, SessionState::Starting));
        assert_eq!(
            hub.channel_count(),
            0,
            "a publish nobody hears drops the channel"
        );
    }
}
