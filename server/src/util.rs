//! Small helpers every layer may use: the wall clock, ids, a fast map. Imports nothing of the crate.

/// Milliseconds since the Unix epoch, UTC.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A random id: 20 hex characters (80 bits).
pub fn new_id() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 10];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// A fast hasher for the in-memory tables on the proxy's path (keys are not attacker-chosen
/// in a way that matters: only known credentials and session ids are stored).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
