//! The admin tables as CSV (`GET /api/v1/admin/<table>.csv`, the same search, filter and sort as
//! the JSON listing, every page): for a spreadsheet or the platform's own reports.

use super::{ApiError, ApiQuery, ApiResult, ApiUser};
use crate::http::AppState;
use app::domain::credits;
use app::domain::listing::{ListQuery, Page};
use app::error::AppError;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

/// The most rows one download carries (100 pages of 100).
const MAX_PAGES: u32 = 100;

/// A text cell as a spreadsheet will not run it: one that begins like a formula gets a `'`
/// (OWASP's advice against CSV injection). Numbers are written by the code, never escaped.
pub fn cell(text: &str) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_string()
    }
}

fn utc(ms: i64) -> String {
    app::domain::dates::minute(ms)
}

/// Every page of a listing, from the first, up to [`MAX_PAGES`].
async fn all_pages<T, F, Fut>(query: ListQuery, mut fetch: F) -> Result<Vec<T>, AppError>
where
    F: FnMut(ListQuery) -> Fut,
    Fut: std::future::Future<Output = Result<Page<T>, AppError>>,
{
    let mut rows = Vec::new();
    let mut page = 1;
    loop {
        let answer = fetch(ListQuery {
            page: Some(page),
            per_page: Some(100),
            ..query.clone()
        })
        .await?;
        let pages = answer.pages();
        rows.extend(answer.items);
        if page >= pages || page >= MAX_PAGES {
            return Ok(rows);
        }
        page += 1;
    }
}

fn csv_response(name: &str, header: &[&str], rows: Vec<Vec<String>>) -> ApiResult<Response> {
    let mut out = csv::Writer::from_writer(Vec::new());
    let written = out
        .write_record(header)
        .and_then(|()| rows.iter().try_for_each(|row| out.write_record(row)));
    let body = written
        .map_err(|e| e.to_string())
        .and_then(|()| out.into_inner().map_err(|e| e.to_string()))
        .map_err(|e| {
            tracing::error!(error = %e, "writing a CSV export");
            ApiError(AppError::Internal)
        })?;
    Ok((
        [
            (
                http::header::CONTENT_TYPE,
                "text/csv; charset=utf-8".to_string(),
            ),
            (
                http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}.csv\""),
            ),
        ],
        body,
    )
        .into_response())
}

pub(super) async fn users_csv(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Response> {
    let admin = &state.service.admin;
    let rows = all_pages(query, |q| {
        let (admin, viewer) = (admin.clone(), viewer.clone());
        async move { admin.admin_users(&viewer, &q).await }
    })
    .await?;
    csv_response(
        "users",
        &[
            "name",
            "role",
            "locked",
            "single_sign_on",
            "credits",
            "held",
            "live_sessions",
            "created_utc",
            "max_sessions",
            "max_gpu_mib",
            "max_minutes",
            "max_disk_mib",
            "asks_for_credits",
        ],
        rows.into_iter()
            .map(|u| {
                vec![
                    cell(&u.name),
                    u.role.as_str().into(),
                    u.locked.to_string(),
                    u.single_sign_on.to_string(),
                    credits::format(u.balance),
                    credits::format(u.held),
                    u.live_sessions.to_string(),
                    utc(u.created_at_ms),
                    u.limits.max_sessions.to_string(),
                    u.limits.max_gpu_mib.to_string(),
                    u.limits.max_minutes.to_string(),
                    u.limits.max_disk_mib.to_string(),
                    u.credit_request
                        .map(|ask| credits::format(ask.amount))
                        .unwrap_or_default(),
                ]
            })
            .collect(),
    )
}

pub(super) async fn sessions_csv(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Response> {
    let admin = &state.service.admin;
    let rows = all_pages(query, |q| {
        let (admin, viewer) = (admin.clone(), viewer.clone());
        async move { admin.admin_sessions(&viewer, &q).await }
    })
    .await?;
    csv_response(
        "sessions",
        &[
            "id",
            "user",
            "editor",
            "slice_mib",
            "gpu_model",
            "state",
            "end_reason",
            "created_utc",
            "ends_utc",
            "ended_utc",
            "price_per_hour",
        ],
        rows.into_iter()
            .map(|s| {
                vec![
                    s.id,
                    cell(&s.user_name),
                    s.editor.as_str().into(),
                    s.slice_mib.to_string(),
                    cell(&s.gpu_model.unwrap_or_default()),
                    s.state.as_str().into(),
                    s.end_reason
                        .map(|r| r.as_str().to_string())
                        .unwrap_or_default(),
                    utc(s.created_at_ms),
                    s.ends_at_ms.map(utc).unwrap_or_default(),
                    s.ended_at_ms.map(utc).unwrap_or_default(),
                    credits::format(s.price_per_hour),
                ]
            })
            .collect(),
    )
}

pub(super) async fn usage_csv(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Response> {
    let admin = &state.service.admin;
    let rows = all_pages(query, |q| {
        let (admin, viewer) = (admin.clone(), viewer.clone());
        async move { admin.admin_usage(&viewer, &q).await }
    })
    .await?;
    csv_response(
        "usage",
        &[
            "user",
            "sessions",
            "hours_used",
            "slice_gib_hours",
            "credits_charged",
            "gpu_utilization_pct",
            "gpu_memory_mib",
        ],
        rows.into_iter()
            .map(|u| {
                vec![
                    cell(&u.user_name),
                    u.sessions.to_string(),
                    format!("{:.2}", u.used_ms as f64 / 3_600_000.0),
                    format!("{:.2}", u.slice_gib_hours()),
                    credits::format(u.charged),
                    u.gpu_utilization_pct
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    u.gpu_memory_mib.map(|m| m.to_string()).unwrap_or_default(),
                ]
            })
            .collect(),
    )
}

pub(super) async fn audit_csv(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Response> {
    let admin = &state.service.admin;
    let rows = all_pages(query, |q| {
        let (admin, viewer) = (admin.clone(), viewer.clone());
        async move { admin.admin_audit(&viewer, &q).await }
    })
    .await?;
    csv_response(
        "audit",
        &["at_utc", "actor", "action", "target", "detail"],
        rows.into_iter()
            .map(|l| {
                vec![
                    utc(l.at_ms),
                    cell(&l.actor.unwrap_or_default()),
                    cell(&l.action),
                    cell(&l.target_name.unwrap_or(l.target)),
                    cell(&l.detail),
                ]
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::cell;

    #[test]
    fn a_cell_that_looks_like_a_formula_is_not_one() {
        assert_eq!(cell("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
        assert_eq!(cell("+1"), "'+1");
        assert_eq!(cell("-2+3"), "'-2+3");
        assert_eq!(cell("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(cell("ada"), "ada");
        assert_eq!(cell(""), "");
    }
}
