//! Promoting a file to the registry, and the admins' decisions.

use super::*;

#[server(endpoint = "promote_file", input = leptos::server_fn::codec::Json)]
pub async fn promote_file(
    session_id: String,
    request: crate::domain::promotion::PromotionRequest,
) -> Result<PromotionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .promote_file(&viewer, &session_id, request)
        .await
}

#[server(endpoint = "my_promotions")]
pub async fn my_promotions() -> Result<Promotions, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.promotions(&viewer).await
}

#[server(endpoint = "admin_promotions", input = leptos::server_fn::codec::Json)]
pub async fn admin_promotions(query: ListQuery) -> Result<Page<PromotionView>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_promotions(&viewer, &query).await
}

#[server(endpoint = "decide_promotion", input = leptos::server_fn::codec::Json)]
pub async fn decide_promotion(
    id: String,
    decision: crate::domain::promotion::Decision,
    reason: Option<String>,
) -> Result<PromotionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .decide_promotion(&viewer, &id, decision, reason)
        .await
}
