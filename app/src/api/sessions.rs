//! The dashboard and one's own sessions: launch, see, stop, heartbeat, extend.

use super::*;
#[cfg(feature = "ssr")]
use crate::domain::launch::LaunchRequest;

#[server(endpoint = "load_dashboard")]
pub async fn load_dashboard() -> Result<DashboardPage, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.dashboard(&viewer).await
}

#[server(endpoint = "launch")]
pub async fn launch(
    editor: String,
    slice_mib: u64,
    duration_minutes: u32,
    #[server(default)] image: Option<String>,
    #[server(default)] idle_minutes: Option<u32>,
) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    let request = LaunchRequest {
        editor,
        slice_mib,
        duration_minutes,
        image,
        idle_minutes,
    };
    backend::backend()?.launch(&viewer, request).await
}

#[server(endpoint = "get_session")]
pub async fn get_session(id: String) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.session(&viewer, &id).await
}

/// The session's readings of the last hour, for its sparklines.
#[server(endpoint = "load_session_readings")]
pub async fn load_session_readings(id: String) -> Result<SessionReadings, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.session_readings(&viewer, &id).await
}

#[server(endpoint = "stop_session")]
pub async fn stop_session(id: String) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.stop(&viewer, &id).await
}

/// A visible page says the person is (`input`) or may be there, or (`left`) that it has just gone
/// out of sight; returns the session's new countdowns.
#[server(endpoint = "heartbeat")]
pub async fn heartbeat(
    id: String,
    input: bool,
    // A page loaded before `left` existed still beats.
    #[server(default)] left: bool,
) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    let beat = crate::domain::presence::Beat { input, left };
    backend::backend()?.heartbeat(&viewer, &id, beat).await
}

impl Heartbeat {
    /// The person at a page in sight did something ("I'm here").
    pub fn input(id: String) -> Heartbeat {
        Heartbeat {
            id,
            input: true,
            left: false,
        }
    }
}

#[server(endpoint = "extend_session")]
pub async fn extend_session(id: String, minutes: u32) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.extend(&viewer, &id, minutes).await
}
