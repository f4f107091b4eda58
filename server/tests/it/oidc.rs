//! Single sign-on against a real OpenID Connect provider (`oidc-provider` from npm, started by
//! each test from `end2end/oidc/provider.mjs`): the whole code flow with PKCE, accounts made and
//! found by the provider's subject, roles from groups, and the ways a sign-in is refused.

use crate::common::{FakeRuntime, Response, TestApp};
use http::{Request, StatusCode};
use http_body_util::Full;
use server::oidc::OidcConfig;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use tokio::io::AsyncBufReadExt;

/// Where the provider sends browsers back; the test takes the path and asks our server.
const REDIRECT: &str = "http://sandbox.test/auth/oidc/callback";

struct Provider {
    issuer: String,
    _process: tokio::process::Child,
}

impl Provider {
    async fn start() -> Provider {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../end2end");
        assert!(
            root.join("node_modules/oidc-provider").exists(),
            "oidc-provider is not installed in end2end/; run scripts/setup.sh --test (or scripts/test.sh, which does)"
        );
        // Port 0: it takes a free one and names it.
        let mut process = tokio::process::Command::new("node")
            .arg(root.join("oidc/provider.mjs"))
            .arg("0")
            .arg(REDIRECT)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node");
        let mut lines = tokio::io::BufReader::new(process.stdout.take().unwrap()).lines();
        let port: u16 = tokio::time::timeout(std::time::Duration::from_secs(20), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(port) = line.strip_prefix("ready ") {
                    return port.parse().expect("the provider names its port");
                }
            }
            panic!("the provider exited before it was ready");
        })
        .await
        .expect("the provider starts");
        // Its later notices go on to the test's output; a closed pipe would kill it.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("provider: {line}");
            }
        });
        Provider {
            issuer: format!("http://127.0.0.1:{port}"),
            _process: process,
        }
    }

    fn config(&self) -> OidcConfig {
        OidcConfig {
            issuer: self.issuer.clone(),
            client_id: "sandbox".into(),
            client_secret: "sandbox-secret".into(),
            redirect_url: REDIRECT.into(),
            display_name: "Test IdP".into(),
            scopes: ["openid", "profile", "groups"].map(String::from).into(),
            username_claim: "preferred_username".into(),
            allow_unverified_email: false,
            groups_claim: "groups".into(),
            admin_groups: vec!["gpu-admins".into()],
        }
    }

    async fn next_account(&self, app: &TestApp, account: &str) {
        let request = Request::post(format!("{}/test/next-account", self.issuer))
            .body(Full::new(account.to_string().into()))
            .unwrap();
        app.send(request)
            .await
            .assert_status(StatusCode::NO_CONTENT);
    }
}

fn location(response: &Response) -> String {
    response
        .headers
        .get("location")
        .unwrap_or_else(|| {
            panic!(
                "a redirect, not {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            )
        })
        .to_str()
        .unwrap()
        .to_string()
}

/// The `name=value` of each cookie a response sets.
fn cookies_set(response: &Response) -> Vec<(String, String)> {
    response
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next()?.split_once('='))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect()
}

async fn get(app: &TestApp, url: &str, cookies: &BTreeMap<String, String>) -> Response {
    let cookie = cookies
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join("; ");
    let request = Request::get(url)
        .header("cookie", cookie)
        .header("accept", "text/html")
        .body(Full::default())
        .unwrap();
    app.send(request).await
}

/// A browser's round trip: our sign-in link, the provider's redirects (its own cookies kept),
/// back to our callback. Returns the callback's answer and the browser's cookies for us.
async fn round_trip(
    app: &TestApp,
    provider: &Provider,
    account: &str,
) -> (Response, BTreeMap<String, String>) {
    round_trip_from(app, provider, account, "/auth/oidc/login?next=/s/x/lab").await
}

async fn round_trip_from(
    app: &TestApp,
    provider: &Provider,
    account: &str,
    start: &str,
) -> (Response, BTreeMap<String, String>) {
    provider.next_account(app, account).await;
    let mut ours = BTreeMap::new();
    let started = get(app, &app.url(start), &ours).await;
    assert_eq!(started.status, StatusCode::SEE_OTHER);
    ours.extend(cookies_set(&started));
    let url = location(&started);
    assert!(url.starts_with(&provider.issuer), "to the provider: {url}");
    assert!(
        url.contains("code_challenge_method=S256") && url.contains("nonce="),
        "PKCE and a nonce: {url}"
    );
    follow(app, provider, url, ours).await
}

/// Follows the browser from `url` at the provider back to our callback, with our cookies `ours`.
async fn follow(
    app: &TestApp,
    provider: &Provider,
    mut url: String,
    mut ours: BTreeMap<String, String>,
) -> (Response, BTreeMap<String, String>) {
    let mut theirs = BTreeMap::new();
    for _ in 0..10 {
        if let Some(back) = url.strip_prefix("http://sandbox.test") {
            let answer = get(app, &app.url(back), &ours).await;
            ours.extend(cookies_set(&answer));
            return (answer, ours);
        }
        let answer = get(app, &url, &theirs).await;
        theirs.extend(cookies_set(&answer));
        let next = location(&answer);
        url = if next.starts_with('/') {
            format!("{}{next}", provider.issuer)
        } else {
            next
        };
    }
    panic!("the provider never sent the browser back");
}

async fn me(app: &TestApp, cookies: &BTreeMap<String, String>) -> Response {
    let request = Request::get(app.url("/api/v1/me"))
        .header(
            "cookie",
            format!("sandbox_session={}", cookies["sandbox_session"]),
        )
        .body(Full::default())
        .unwrap();
    app.send(request).await
}

#[tokio::test]
async fn people_sign_in_through_the_provider_and_get_their_own_accounts() {
    let provider = Provider::start().await;
    let config = provider.config();
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| c.oidc = Some(config)).await;
    let page = app.get("/login", None).await;
    assert!(
        String::from_utf8_lossy(&page.body).contains("Sign in with Test IdP"),
        "the sign-in page offers the provider"
    );

    // First sign-in: an account is made, an admin by the provider's groups, with the starting
    // grant, and the browser goes where it was going.
    let (answer, cookies) = round_trip(&app, &provider, "olga").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(location(&answer), "/s/x/lab");
    let who = me(&app, &cookies).await;
    who.assert_status(StatusCode::OK);
    let who = who.json();
    assert_eq!(who["name"], "olga");
    assert_eq!(who["role"], "admin");
    assert_eq!(
        who["credits"]["balance"],
        app.service.config().initial_grant()
    );
    let olga = app.store.user_by_name("olga").await.unwrap().unwrap();
    assert!(olga.password_hash.is_none(), "no password to guess");

    // Again: the same account, found by the provider's subject.
    let (_, again) = round_trip(&app, &provider, "olga").await;
    assert_eq!(me(&app, &again).await.json()["id"], olga.id);
    assert_ne!(
        again["sandbox_session"], cookies["sandbox_session"],
        "a new session id"
    );

    // Without the admin group: a user. Two first sign-ins at once (two tabs) both get in, to
    // the one account.
    let ((first, one), (second, other)) = tokio::join!(
        round_trip(&app, &provider, "omar"),
        round_trip(&app, &provider, "omar")
    );
    assert_eq!(location(&first), "/s/x/lab");
    assert_eq!(location(&second), "/s/x/lab");
    let (one, other) = (me(&app, &one).await.json(), me(&app, &other).await.json());
    assert_eq!(one["role"], "user");
    assert_eq!(one["id"], other["id"]);

    // A provider's "admin" does not become the local admin account.
    app.service
        .accounts
        .create_user(
            "admin",
            Some("local-password"),
            app::model::Role::Admin,
            None,
        )
        .await
        .unwrap();
    let (answer, cookies) = round_trip(&app, &provider, "admin").await;
    assert_eq!(location(&answer), "/login?sso=taken");
    assert!(me(&app, &cookies).await.status == StatusCode::UNAUTHORIZED);
    // Until an admin links that identity to the account (`server user link`).
    let local = app.store.user_by_name("admin").await.unwrap().unwrap();
    let identity = format!("{}|admin", provider.issuer);
    assert!(
        app.service
            .accounts
            .link_identity(&local.id, "admin")
            .await
            .is_err()
    );
    app.service
        .accounts
        .link_identity(&local.id, &identity)
        .await
        .unwrap();
    let (answer, cookies) = round_trip(&app, &provider, "admin").await;
    assert_eq!(location(&answer), "/s/x/lab");
    assert_eq!(me(&app, &cookies).await.json()["id"], local.id);
    assert!(matches!(
        app.service
            .accounts
            .link_identity(&olga.id, &identity)
            .await,
        Err(app::error::AppError::Conflict(_))
    ));

    // A locked account stays out.
    app.service
        .accounts
        .set_locked(&olga.id, true, None)
        .await
        .unwrap();
    let (answer, _) = round_trip(&app, &provider, "olga").await;
    assert_eq!(location(&answer), "/login?sso=locked");
    let log = app.store.audit_log(50).await.unwrap();
    assert!(
        log.iter()
            .any(|e| e.action == "login" && e.target == "user:olga" && e.detail == "oidc"),
        "sign-ins are audited"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_answer_that_is_not_for_this_browser_signs_nobody_in() {
    let provider = Provider::start().await;
    let config = provider.config();
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| c.oidc = Some(config)).await;
    let (answer, cookies) = round_trip(&app, &provider, "omar").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);

    // The callback again (replayed, or another browser's): nothing is waiting for it.
    let replay = get(
        &app,
        &app.url("/auth/oidc/callback?code=abc&state=xyz"),
        &BTreeMap::new(),
    )
    .await;
    assert_eq!(location(&replay), "/login?sso=expired");
    // A pending sign-in, answered with another state.
    let mut browser = BTreeMap::new();
    let started = get(&app, &app.url("/auth/oidc/login"), &browser).await;
    browser.extend(cookies_set(&started));
    let forged = get(
        &app,
        &app.url("/auth/oidc/callback?code=abc&state=not-the-state"),
        &browser,
    )
    .await;
    assert_eq!(location(&forged), "/login?sso=expired");
    // A stray answer (a link from elsewhere) leaves this browser's sign-in waiting; the
    // provider's refusal of it ends it, once.
    let started = get(&app, &app.url("/auth/oidc/login"), &browser).await;
    browser.extend(cookies_set(&started));
    let to_provider = location(&started);
    let state = to_provider
        .split(['?', '&'])
        .find_map(|pair| pair.strip_prefix("state="))
        .expect("a state");
    let stray = get(
        &app,
        &app.url("/auth/oidc/callback?error=access_denied&state=x"),
        &browser,
    )
    .await;
    assert_eq!(location(&stray), "/login?sso=expired");
    let refusal = app.url(&format!(
        "/auth/oidc/callback?error=access_denied&state={state}"
    ));
    let refused = get(&app, &refusal, &browser).await;
    assert_eq!(location(&refused), "/login?sso=refused");
    let again = get(&app, &refusal, &browser).await;
    assert_eq!(location(&again), "/login?sso=expired");
    assert_eq!(me(&app, &browser).await.status, StatusCode::UNAUTHORIZED);
    // After signing in, the browser goes to a path of ours only.
    let (outside, _) = round_trip_from(
        &app,
        &provider,
        "omar",
        "/auth/oidc/login?next=//evil.example/",
    )
    .await;
    assert_eq!(location(&outside), "/");
    assert_eq!(me(&app, &cookies).await.json()["name"], "omar");
    app.stop().await;
}

/// By default an account is named by its email, and only by one the provider verified: a person
/// who typed a colleague's address at the provider does not take the colleague's name here.
#[tokio::test]
async fn an_unverified_email_names_no_account() {
    let provider = Provider::start().await;
    let config = OidcConfig {
        scopes: ["openid", "profile", "email", "groups"]
            .map(String::from)
            .into(),
        // The default (the unit tests check it is).
        username_claim: "email".into(),
        ..provider.config()
    };
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| c.oidc = Some(config)).await;
    let (answer, _) = round_trip(&app, &provider, "eve").await;
    assert_eq!(location(&answer), "/login?sso=unverified");
    assert!(
        app.store
            .user_by_name("omar@example.test")
            .await
            .unwrap()
            .is_none(),
        "nobody got omar's address as a name"
    );
    let page = app.get("/login?sso=unverified", None).await;
    assert!(
        String::from_utf8_lossy(&page.body).contains("not verified at the identity provider"),
        "the page says why"
    );
    // The colleague, whose address the provider verified, gets it.
    let (answer, cookies) = round_trip(&app, &provider, "omar").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(me(&app, &cookies).await.json()["name"], "omar@example.test");
}

#[tokio::test]
async fn without_a_provider_the_sign_in_page_offers_none() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let page = app.get("/login", None).await;
    assert!(!String::from_utf8_lossy(&page.body).contains("Sign in with"));
    let start = app.get("/auth/oidc/login", None).await;
    assert_eq!(location(&start), "/login?sso=off");
    app.stop().await;
}

/// An account without a password makes a token from its browser only after confirming at the
/// provider (asked to sign in again), and only for a few minutes after.
#[tokio::test]
async fn single_sign_on_accounts_make_tokens_after_confirming_at_the_provider() {
    let provider = Provider::start().await;
    let config = provider.config();
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| c.oidc = Some(config)).await;
    let (_, cookies) = round_trip(&app, &provider, "omar").await;
    let make = async |cookies: &BTreeMap<String, String>| {
        let request = Request::post(app.url("/api/v1/tokens"))
            .header(
                "cookie",
                format!("sandbox_session={}", cookies["sandbox_session"]),
            )
            .header("sec-fetch-site", "same-origin")
            .header("content-type", "application/json")
            .body(Full::new(r#"{"label":"laptop","days":7}"#.into()))
            .unwrap();
        app.send(request).await
    };
    let refused = make(&cookies).await;
    refused.assert_status(StatusCode::FORBIDDEN);
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("confirm who you are with Test IdP"),
        "{}",
        refused.json()
    );
    let asked = get(&app, &app.url("/auth/oidc/login?confirm=true"), &cookies).await;
    let asked = location(&asked);
    assert!(
        asked.contains("prompt=login") && asked.contains("max_age=0"),
        "the provider is asked to sign the person in again: {asked}"
    );
    let (answer, confirmed) = round_trip_from(
        &app,
        &provider,
        "omar",
        "/auth/oidc/login?confirm=true&next=/tokens",
    )
    .await;
    assert_eq!(location(&answer), "/tokens");
    let made = make(&confirmed).await;
    made.assert_status(StatusCode::CREATED);
    let token = made.json()["token"].as_str().unwrap().to_string();
    let me = app.get("/api/v1/me", Some(&token)).await;
    me.assert_status(StatusCode::OK);
    assert_eq!(me.json()["name"], "omar");
    app.stop().await;
}

/// Sign-ins started in two tabs of one browser each complete; an answer is good once.
#[tokio::test]
async fn sign_ins_started_in_two_tabs_both_complete() {
    let provider = Provider::start().await;
    let config = provider.config();
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| c.oidc = Some(config)).await;
    provider.next_account(&app, "omar").await;
    let mut browser = BTreeMap::new();
    let first = get(&app, &app.url("/auth/oidc/login?next=/first"), &browser).await;
    browser.extend(cookies_set(&first));
    let second = get(&app, &app.url("/auth/oidc/login?next=/second"), &browser).await;
    browser.extend(cookies_set(&second));
    // The first tab comes back last, after the second has signed the browser in.
    let (answer, browser) = follow(&app, &provider, location(&second), browser).await;
    assert_eq!(location(&answer), "/second");
    let (answer, browser) = follow(&app, &provider, location(&first), browser).await;
    assert_eq!(location(&answer), "/first");
    assert_eq!(me(&app, &browser).await.json()["name"], "omar");
    app.stop().await;
}
