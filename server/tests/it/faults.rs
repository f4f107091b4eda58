//! Faults and bad input: a client that goes away in the middle of a write, and what must still
//! work afterwards.

use crate::common::{FakeRuntime, TestApp};
use http::StatusCode;
use serde_json::json;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The head and body of an authenticated `POST /api/v1/tokens`, as one write.
fn token_request(token: &str, label: &str) -> Vec<u8> {
    let body = json!({ "label": label }).to_string();
    format!(
        "POST /api/v1/tokens HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn writes_survive_clients_that_hang_up_in_the_middle_of_one() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (user_id, token) = app.user("quitter").await;
    // Each client sends a whole write and closes at once, or a moment later: the server is
    // inside the write's transaction when it notices, or about to begin it.
    let hang_up = |i: u64| {
        let request = token_request(&token, &format!("gone {i}"));
        let addr = app.addr;
        async move {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.write_all(&request).await.unwrap();
            // Closed at once or within 2 ms: while the server reads, begins or holds the write.
            let wait = (i * 37) % 2000;
            if wait > 100 {
                tokio::time::sleep(Duration::from_micros(wait)).await;
            }
            drop(tcp);
        }
    };
    for round in 0..100u64 {
        futures_util::future::join_all((0..8).map(|k| hang_up(round * 8 + k))).await;
    }
    // Writes still go through, one after another and several at once, and every account's
    // tokens can still be listed and made.
    for i in 0..5 {
        let made = app
            .call(
                http::Method::POST,
                "/api/v1/tokens",
                Some(&token),
                Some(json!({ "label": format!("after {i}") })),
            )
            .await;
        made.assert_status(StatusCode::CREATED);
    }
    let together = futures_util::future::join_all((0..8).map(|i| {
        app.call(
            http::Method::POST,
            "/api/v1/tokens",
            Some(&token),
            Some(json!({ "label": format!("together {i}") })),
        )
    }))
    .await;
    for made in together {
        made.assert_status(StatusCode::CREATED);
    }
    let (_, other) = app.user("stayer").await;
    app.launch_ready(&other, "jupyterlab").await;
    // What the hung-up clients asked for was either done whole or not at all.
    let listed = app.get("/api/v1/tokens", Some(&token)).await;
    listed.assert_status(StatusCode::OK);
    let labels: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["label"].as_str().unwrap().to_string())
        .collect();
    assert!(
        labels.iter().filter(|l| l.starts_with("after ")).count() == 5,
        "{labels:?}"
    );
    let tokens = app.store.tokens_of(&user_id).await.unwrap();
    assert_eq!(tokens.len(), labels.len());
}
