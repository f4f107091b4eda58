//! The leases that tell replicas apart: each server's own (it lives), and the reaper's (one
//! replica reaps at a time).

use super::Guard;
use std::time::Duration;

/// Whether the server `instance` (`<host>~<pid>~<random>`) was a process of this host (`here`:
/// its name and this process's pid) that no longer runs: its pid is gone, or is this process's
/// own (a container restarted in place) while `ours` does not know it. Another host's, or an id
/// of another form, cannot be told: its lease decides.
pub fn died_here(
    instance: &str,
    here: (&str, u32),
    alive: impl Fn(u32) -> bool,
    ours: impl Fn(&str) -> bool,
) -> bool {
    let mut parts = instance.split('~');
    let (Some(host), Some(pid), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    !here.0.is_empty()
        && host == here.0
        && if pid == here.1 {
            !ours(instance)
        } else {
            !alive(pid)
        }
}

fn pid_alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(crate::runtime::procfs::process_alive)
}

/// The lease that makes one replica the reaper at a time.
pub(crate) const REAPER_LEASE: &str = "reaper";
/// How long a server's instance lease lasts; it is renewed four times as often, from a task of
/// its own, so that a slow reaper pass or a busy moment does not make the others think it died.
const INSTANCE_LEASE: Duration = Duration::from_secs(60);

/// Keeps this server's instance lease for as long as it serves.
pub async fn keep_instance_lease(service: Guard) {
    let mut renew = tokio::time::interval(INSTANCE_LEASE / 4);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        renew.tick().await;
        service.keep_alive().await;
    }
}

impl Guard {
    /// Whether the server `instance` still lives: it holds its lease, and is not a process of
    /// this machine that is gone ([`died_here`]).
    pub(in crate::service) async fn instance_alive(
        &self,
        instance: &str,
    ) -> Result<bool, crate::store::StoreError> {
        let here = (crate::util::host_name(), std::process::id());
        if died_here(
            instance,
            (&here.0, here.1),
            pid_alive,
            crate::util::instance_of_this_process,
        ) {
            return Ok(false);
        }
        self.store.lease_held(&instance_lease(instance)).await
    }

    /// Renews this server's instance lease, until shutdown begins.
    pub async fn keep_alive(&self) {
        if *self.closing.borrow() {
            return;
        }
        let lease = instance_lease(&self.instance);
        let ttl = INSTANCE_LEASE.as_millis() as i64;
        if let Err(e) = self.store.try_lease(&lease, &self.instance, ttl).await {
            tracing::warn!(error = %e, "renewing this server's lease");
        }
    }

    /// Gives the instance lease up at shutdown: the next server to start need not wait for it to
    /// run out before it ends the launches this one left.
    pub async fn release_instance(&self) {
        let lease = instance_lease(&self.instance);
        if let Err(e) = self.store.release_lease(&lease, &self.instance).await {
            tracing::warn!(error = %e, "releasing this server's lease");
        }
    }

    /// Takes the reaper lease from a holder that is dead (a process of this machine that is gone,
    /// or a server whose own lease ran out): a restarted server reaps, and notices a re-adopted
    /// editor's crash, at once rather than once the dead one's lease runs out.
    pub(super) async fn take_reaper_from_the_dead(&self, ttl: i64) -> bool {
        let Ok(Some(holder)) = self.store.lease_holder(REAPER_LEASE).await else {
            return false;
        };
        if holder == *self.instance || !matches!(self.instance_alive(&holder).await, Ok(false)) {
            return false;
        }
        match self
            .store
            .take_lease_from(REAPER_LEASE, &holder, &self.instance, ttl)
            .await
        {
            Ok(taken) => {
                if taken {
                    tracing::info!(from = %holder, "took the reaper lease from a server that died");
                }
                taken
            }
            Err(e) => {
                tracing::warn!(error = %e, "taking the reaper lease from a server that died");
                false
            }
        }
    }
}

/// The lease that says this server lives: another server starting up leaves the launches
/// this one drives alone while it is held.
pub(in crate::service) fn instance_lease(instance: &str) -> String {
    format!("instance:{instance}")
}

#[cfg(test)]
mod tests {
    use super::died_here;

    #[test]
    fn a_predecessor_on_this_host_is_dead_once_its_pid_is_gone_or_ours() {
        let here = ("gpu-box", 4242);
        let alive = |pid: u32| pid == 77;
        let ours = |id: &str| id == "gpu-box~4242~live";
        let dead = |id: &str, here: (&str, u32)| died_here(id, here, alive, ours);
        assert!(dead("gpu-box~1234~ab12", here), "its pid is gone");
        assert!(dead("gpu-box~4242~ab12", here), "its pid is ours now");
        assert!(
            !dead("gpu-box~4242~live", here),
            "a server of this very process"
        );
        assert!(!dead("gpu-box~77~ab12", here), "a live replica here");
        assert!(
            !dead("other-box~1234~ab12", here),
            "another host's: its lease decides"
        );
        assert!(
            !dead("0a1b2c3d4e5f60718293", here),
            "an id from before: its lease decides"
        );
        assert!(!dead("gpu-box~x~ab12", here));
        assert!(
            !dead("gpu-box~1234~ab12", ("", 4242)),
            "no host name: nothing told"
        );
    }
}
