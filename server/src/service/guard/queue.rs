//! The queue's dispatcher: hands freed slots to the head of the line.

use super::Guard;
use crate::store::queue_message;

impl Guard {
    /// Dispatches the queue whenever a stop here frees a slot (the reaper's pass also does, for
    /// slots freed elsewhere). Runs for the server's life.
    pub async fn keep_queue_moving(self) {
        loop {
            self.queue_wake.notified().await;
            self.dispatch_queue().await;
        }
    }

    /// Gives freed slots to the queue, oldest first, and tells the rest their new place in line.
    pub async fn dispatch_queue(&self) {
        // Shutting down: slots freed by the shutdown's own stops are not handed out, or the
        // queue's head would start an editor only to be cut short; it keeps its place instead.
        if *self.closing.borrow() {
            return;
        }
        let price_on = |gpu_id: &str, slice_mib: u64| self.launcher.price_on(gpu_id, slice_mib);
        let dispatched = match self.store.dispatch_queued(&price_on).await {
            Ok(dispatched) => dispatched,
            Err(e) => {
                tracing::warn!(error = %e, "dispatching the queue");
                return;
            }
        };
        for d in &dispatched {
            self.events.publish(&d.session_id, d.step.clone());
            self.warm.stop_warm(d.evicted.clone());
            let Ok(Some(record)) = self.store.session(&d.session_id).await else {
                continue;
            };
            let Ok(Some(user)) = self.store.user_by_id(&record.user_id).await else {
                continue;
            };
            self.launcher.drive(&d.session_id).await;
            let service = self.launcher.clone();
            let session_id = d.session_id.clone();
            self.background
                .spawn(async move { service.run_launch(&session_id, &user.name).await });
        }
        if dispatched.is_empty() {
            return;
        }
        // Everyone still waiting moved up.
        if let Ok(queue) = self.store.queue_positions().await {
            for (id, slice_mib, burst, position) in queue {
                if let Ok(step) = self
                    .store
                    .add_step(&id, &queue_message(slice_mib, burst, position), 20)
                    .await
                {
                    self.events.publish(&id, step);
                }
            }
        }
    }

    // ---- warm pool ----
}
