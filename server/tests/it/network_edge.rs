//! The network edge of the one-server runtime, from inside a real JupyterLab kernel in its
//! sandbox (as root, egress on): a private host, a cloud metadata service and a listener on this
//! machine's own non-loopback address, each a test host this test makes itself (a network
//! namespace joined by a veth pair, with `169.254.169.254` routed to it), are refused with the
//! default `[network]`; the kernel cannot remove the rules; the same attempts succeed with the
//! deny list emptied, and an allowed range is reached, so the test can fail. Nothing is sent to
//! any address outside this machine: every route is checked before the first packet.

use crate::common::TestApp;
use crate::isolation::run_python;
use serde_json::Value;
use std::process::Command;

/// Test hosts are machine-wide (a route for the metadata address): one test at a time.
static HOSTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A namespace standing in for the company's network and the cloud's metadata service, and a
/// listener on this machine's own side of the link. Removed when dropped.
struct TestHosts {
    namespace: String,
    host_link: String,
    /// The private host (also serving the metadata address), on port 80.
    private_v4: String,
    private_v6: Option<String>,
    /// This machine's own address on the link, and a port listening there.
    own: String,
    own_listener: std::net::TcpListener,
    server: std::process::Child,
    _site: tempfile::TempDir,
}

impl TestHosts {
    fn make() -> TestHosts {
        let n = std::process::id() % 200 + 20;
        let namespace = format!("gsbt{n}");
        let (host_link, peer_link) = (format!("gsbh{n}"), format!("gsbp{n}"));
        let (own, private_v4) = (format!("10.213.{n}.1"), format!("10.213.{n}.2"));
        let ipv6 = !ip(&["-6", "route", "show", "default"]).trim().is_empty();
        // What a killed run of this test left.
        for args in [["netns", "del", &namespace], ["link", "del", &host_link]] {
            let _ = Command::new("ip").args(args).output();
        }
        ip(&["netns", "add", &namespace]);
        ip(&[
            "link", "add", &host_link, "type", "veth", "peer", "name", &peer_link,
        ]);
        ip(&["link", "set", &peer_link, "netns", &namespace]);
        ip(&["addr", "add", &format!("{own}/24"), "dev", &host_link]);
        ip(&["link", "set", &host_link, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &namespace, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["link", "set", "lo", "up"]);
        inside(&[
            "addr",
            "add",
            &format!("{private_v4}/24"),
            "dev",
            &peer_link,
        ]);
        inside(&["addr", "add", "169.254.169.254/32", "dev", "lo"]);
        inside(&["link", "set", &peer_link, "up"]);
        let private_v6 = ipv6.then(|| {
            let (own6, private6) = (format!("fd5b:213:{n}::1"), format!("fd5b:213:{n}::2"));
            ip(&[
                "-6",
                "addr",
                "add",
                &format!("{own6}/64"),
                "dev",
                &host_link,
                "nodad",
            ]);
            inside(&[
                "-6",
                "addr",
                "add",
                &format!("{private6}/64"),
                "dev",
                &peer_link,
                "nodad",
            ]);
            private6
        });
        ip(&[
            "route",
            "add",
            "169.254.169.254/32",
            "via",
            &private_v4,
            "dev",
            &host_link,
        ]);
        // Nothing may leave the machine: every target is routed through our own link.
        let mut targets = vec![private_v4.clone(), "169.254.169.254".to_string()];
        targets.extend(private_v6.clone());
        for target in &targets {
            let route = ip(&["route", "get", target]);
            assert!(
                route.contains(&format!("dev {host_link}")),
                "{target} goes through the test link: {route}"
            );
        }
        let site = tempfile::tempdir().unwrap();
        std::fs::write(site.path().join("index.html"), "a test host").unwrap();
        let server = Command::new("ip")
            .args(["netns", "exec", &namespace, "python3", "-m", "http.server"])
            .args(["80", "--bind", "::", "--directory"])
            .arg(site.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("a web server in the test namespace");
        let own_listener = std::net::TcpListener::bind(format!("{own}:0")).unwrap();
        let hosts = TestHosts {
            namespace,
            host_link,
            private_v4,
            private_v6,
            own,
            own_listener,
            server,
            _site: site,
        };
        // From this machine itself every target answers: the test hosts work.
        for url in hosts.urls().values() {
            // A bound a busy machine cannot hit: Python's web server may take a while to start.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            let reached = loop {
                let ok = Command::new("curl")
                    .args(["-sf", "-o", "/dev/null", "--max-time", "5", url])
                    .status()
                    .is_ok_and(|s| s.success());
                if ok || std::time::Instant::now() > deadline {
                    break ok;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            };
            assert!(reached, "{url} answers from the host");
        }
        hosts
    }

    /// Each target by name.
    fn urls(&self) -> std::collections::BTreeMap<&'static str, String> {
        let mut urls = std::collections::BTreeMap::from([
            ("private host", format!("http://{}/", self.private_v4)),
            ("metadata service", "http://169.254.169.254/".to_string()),
        ]);
        if let Some(v6) = &self.private_v6 {
            urls.insert("private host over IPv6", format!("http://[{v6}]/"));
        }
        urls
    }

    /// The attempts from inside, as a Python script that prints one JSON line.
    fn script(&self, try_to_remove_the_rules: bool) -> String {
        let own_port = self.own_listener.local_addr().unwrap().port();
        let mut script = String::from(
            "import json, socket, subprocess, urllib.request\nresults = {}\n\
             def attempt(name, act):\n    try:\n        results[name] = [True, str(act())[:200]]\n    \
             except BaseException as e:\n        results[name] = [False, type(e).__name__ + ': ' + str(e)[:200]]\n",
        );
        if try_to_remove_the_rules {
            script.push_str(
                "def nft(*args):\n    out = subprocess.run(['nft', *args], capture_output=True, text=True)\n    \
                 if out.returncode != 0:\n        raise PermissionError(out.stderr.strip())\n    return out.stdout\n\
                 attempt('remove the rules', lambda: nft('flush', 'ruleset'))\n\
                 attempt('add a rule of its own', lambda: nft('insert', 'rule', 'inet', 'gpu_sandbox_edge', 'output', 'accept'))\n",
            );
        }
        for (name, url) in self.urls() {
            script.push_str(&format!(
                "attempt({name:?}, lambda: urllib.request.urlopen({url:?}, timeout=5).read().decode())\n"
            ));
        }
        script.push_str(&format!(
            "attempt('this machine\\'s own address', lambda: socket.create_connection(({:?}, {own_port}), timeout=5).close())\n",
            self.own
        ));
        if let Some(name) = resolvable_name() {
            script.push_str(&format!(
                "attempt('name resolution', lambda: socket.getaddrinfo({name:?}, 443)[0][4][0])\n"
            ));
        }
        script.push_str("print(json.dumps(results))\n");
        script
    }
}

impl Drop for TestHosts {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip")
            .args(["route", "del", "169.254.169.254/32", "dev", &self.host_link])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .status();
    }
}

/// Whether this machine can make test hosts (root, `ip`, `curl`, nftables): CI's can.
fn can_make_hosts() -> bool {
    // SAFETY: geteuid only reads this process's effective user id.
    let root = unsafe { libc::geteuid() } == 0;
    let have = |program: &str, version: &str| {
        Command::new(program)
            .arg(version)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    root && have("ip", "-V") && have("curl", "--version") && have("nft", "--version")
}

/// A name this machine resolves through DNS (none in `/etc/hosts`), if any: the sandbox must
/// resolve it too, through a resolver that may well sit in a private range (it does on CI).
fn resolvable_name() -> Option<&'static str> {
    use std::net::ToSocketAddrs;
    ["pypi.org", "crates.io", "deb.debian.org"]
        .into_iter()
        .find(|name| {
            (*name, 443)
                .to_socket_addrs()
                .is_ok_and(|mut a| a.next().is_some())
        })
}

fn results_of(printed: &str) -> Value {
    let line = printed.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {printed}"))
}

/// Alice's JupyterLab, started cold (its sandbox made for this test's `[network]`).
async fn alices_kernel(app: &TestApp) -> (String, String) {
    let (_, alice) = app.user("alice").await;
    let session = app.launch_ready(&alice, "jupyterlab").await;
    (alice, session)
}

#[tokio::test]
async fn from_her_kernel_a_user_reaches_no_private_network_metadata_service_or_this_machine() {
    if !can_make_hosts() {
        eprintln!("not root, or no ip/curl/nft: the network edge is not checked here");
        return;
    }
    let _one_at_a_time = HOSTS.lock().await;
    let hosts = TestHosts::make();
    let app = TestApp::start(None).await;
    let (alice, session) = alices_kernel(&app).await;
    let results = results_of(&run_python(&app, &alice, &session, &hosts.script(true)).await);
    for (name, _) in hosts.urls() {
        assert_eq!(results[name][0], false, "{name}: {results:#}");
        // Refused on the way, not answered with an error by the host.
        assert!(
            results[name][1].as_str().unwrap().starts_with("URLError"),
            "{name}: {results:#}"
        );
    }
    for name in [
        "this machine's own address",
        "remove the rules",
        "add a rule of its own",
    ] {
        assert_eq!(results[name][0], false, "{name}: {results:#}");
    }
    if resolvable_name().is_some() {
        assert_eq!(results["name resolution"][0], true, "{results:#}");
    }
    // The session page says what the editor reaches.
    let view = app
        .wait_for(&alice, &session, |v| v["state"] == "ready")
        .await;
    assert!(
        view["steps"]
            .to_string()
            .contains("Network: the internet; never private networks"),
        "{view}"
    );
}

#[tokio::test]
async fn with_the_deny_list_emptied_the_same_attempts_succeed_and_an_allowed_range_is_reached() {
    if !can_make_hosts() {
        eprintln!("not root, or no ip/curl/nft: the network edge is not checked here");
        return;
    }
    let _one_at_a_time = HOSTS.lock().await;
    let hosts = TestHosts::make();
    let own = format!("{}/32", hosts.own);
    let app = TestApp::start_with(None, move |c| {
        c.network.egress_deny = Vec::new();
        c.network.egress_allow = vec![own.clone()];
    })
    .await;
    let (alice, session) = alices_kernel(&app).await;
    let results = results_of(&run_python(&app, &alice, &session, &hosts.script(false)).await);
    for (name, _) in hosts.urls() {
        assert_eq!(results[name][0], true, "{name}: {results:#}");
        assert_eq!(results[name][1], "a test host", "{name}: {results:#}");
    }
    assert_eq!(
        results["this machine's own address"][0], true,
        "an allowed range: {results:#}"
    );
}
