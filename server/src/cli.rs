//! The command line: serve the product, or manage it (users, tokens, credits, quotas). May import:
//! `boot`, `http` (run), `service`, `config`, `store`, `identity`.
//!
//! Only `serve` builds a serving service (`boot::build_service`: the pool written, sessions left by
//! a previous run recovered), and first it holds an exclusive lock on `data_dir/server.lock`:
//! start-up adopts or stops the editors it finds, so a second server on the same directory would
//! stop the first one's. Every other command (`server user add`, `credits grant`, …) only opens the
//! database (`boot::open_service`) and never touches the pool or the sessions of a running server,
//! which sees its changes through the database (a lock ends that user's sign-ins, tokens and editor
//! connections within seconds on every server). The first run's admin password is printed once and
//! saved, mode 0600, in `data_dir/initial-admin-password`. Signals are listened for from the first
//! moment, so a Ctrl-C or SIGTERM during start-up is a clean stop.

use crate::config::Config;
use app::domain::credits;
use app::domain::scope::Scopes;
use app::model::Role;
use clap::{Parser, Subcommand};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "server", about = "GPU development sandbox")]
struct Cli {
    /// TOML configuration file; SANDBOX_* environment variables override it.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the dashboard, the API and the proxy (the default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Read and check the configuration, print what it sets up, and exit (nothing is touched:
    /// a deployment's rendered config.toml is checked with the server's own parser).
    CheckConfig,
    /// Manage accounts.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Manage credits.
    Credits {
        #[command(subcommand)]
        command: CreditsCommand,
    },
    /// Per-user limits over the configured defaults.
    Quota {
        #[command(subcommand)]
        command: QuotaCommand,
    },
    /// Show that GPU slices hold on this machine: the cards NVML finds, then a sandbox made as
    /// for a session asks the driver for half its slice (given) and one and a half (refused).
    GpuCheck {
        /// The slice to try, in MiB (pool.detected_slice_mib when left out).
        #[arg(long)]
        slice_mib: Option<u64>,
    },
    /// Ask the CUDA driver for MiB on card 0 and print what came of it (run by gpu-check).
    #[command(hide = true)]
    GpuProbe {
        #[arg(long)]
        mib: u64,
        /// Fill the memory, say so, wait for a line, then say whether it still holds.
        #[arg(long)]
        hold: bool,
    },
}

#[derive(Subcommand)]
enum QuotaCommand {
    /// Set a user's limits; a limit left out goes back to the configured default.
    Set {
        name: String,
        #[arg(long)]
        max_sessions: Option<u32>,
        #[arg(long)]
        max_gpu_mib: Option<u64>,
        #[arg(long)]
        max_minutes: Option<u32>,
        #[arg(long)]
        max_disk_mib: Option<u64>,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create an account; prints a generated password unless --password-stdin is given.
    Add {
        name: String,
        #[arg(long)]
        admin: bool,
        #[arg(long)]
        password_stdin: bool,
    },
    /// Lock an account: it cannot sign in, and its sign-ins, tokens and open editor connections
    /// stop working within seconds, on every server of this database.
    Lock { name: String },
    /// Unlock an account.
    Unlock { name: String },
    /// Set a local account's password (prints a generated one unless --password-stdin is
    /// given); it is the person's own, with nothing to change at the next sign-in.
    Passwd {
        name: String,
        #[arg(long)]
        password_stdin: bool,
    },
    /// Let an identity from the single sign-on provider sign in to this account (an existing
    /// local one, say, whose name a provider's user has). IDENTITY is `<issuer>|<subject>`, as
    /// the server's log names it when such a sign-in is refused.
    Link { name: String, identity: String },
}

fn parse_scopes(text: &str) -> Result<Scopes, String> {
    Scopes::parse(text)
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a bearer token for a user and print it.
    Create {
        #[arg(long)]
        user: String,
        /// Days until it expires (1 to 365); never when left out.
        #[arg(long)]
        days: Option<u32>,
        /// What the token is for, shown when tokens are listed.
        #[arg(long, default_value = "cli")]
        label: String,
        /// What it may do: some of read, sessions, access, tokens (comma- or space-separated);
        /// all of them when left out.
        #[arg(long, value_parser = parse_scopes)]
        scopes: Option<Scopes>,
    },
    /// List a user's tokens (ids, labels, dates; never the tokens themselves).
    List {
        #[arg(long)]
        user: String,
    },
    /// Revoke one of a user's tokens by its id: it stops working at once.
    Revoke {
        #[arg(long)]
        user: String,
        id: String,
    },
}

#[derive(Subcommand)]
enum CreditsCommand {
    /// Grant credits (e.g. 10 or 2.5; negative to take back).
    Grant {
        name: String,
        #[arg(allow_hyphen_values = true)]
        amount: String,
    },
}

/// Logs to stderr: `SANDBOX_LOG` filters (`info` by default), `SANDBOX_LOG_FORMAT=json` writes
/// one JSON object a line (with the request's id, from its span) for log shippers; colours only
/// on a terminal.
fn init_logs() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("SANDBOX_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,sqlx=warn,tower_sessions=warn")
    });
    let format = std::env::var("SANDBOX_LOG_FORMAT").unwrap_or_default();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format.to_ascii_lowercase().as_str() {
        "json" => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
        other => {
            builder.with_ansi(std::io::stderr().is_terminal()).init();
            if !matches!(other, "" | "text") {
                tracing::warn!(
                    "SANDBOX_LOG_FORMAT={format:?} is not a log format; writing text (say json or text)"
                );
            }
        }
    }
}

/// Parses the command line and runs it; the binary's `main`.
pub fn main() -> ExitCode {
    init_logs();
    let cli = Cli::parse();
    // In a sandbox, with nothing of the server's: no configuration, no runtime.
    if let Some(Command::GpuProbe { mib, hold }) = cli.command {
        match hold {
            true => crate::runtime::gpu_park_check::hold(mib),
            false => drop(print_probe(mib)),
        }
        return ExitCode::SUCCESS;
    }
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(dispatch(cli.command.unwrap_or(Command::Serve), config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What `check-config` prints of a configuration that loaded: its runtime and, one a line, the
/// cluster's dataset sources as the server read them.
fn config_summary(config: &Config) -> String {
    let mut out = format!(
        "configuration ok: runtime {}\n",
        format!("{:?}", config.runtime).to_ascii_lowercase()
    );
    for (name, source) in &config.kube.dataset_sources {
        let storage = match (&source.nfs, &source.csi) {
            (Some(nfs), _) => format!("nfs {}:{}", nfs.server, nfs.path),
            (None, Some(csi)) => {
                let mut line = format!("csi {} volume {}", csi.driver, csi.volume_handle);
                if !csi.fs_type.is_empty() {
                    line += &format!(" fs {}", csi.fs_type);
                }
                if !csi.volume_attributes.is_empty() {
                    let pairs: Vec<String> = csi
                        .volume_attributes
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    line += &format!(" attributes {}", pairs.join(", "));
                }
                line
            }
            (None, None) => "none".into(),
        };
        out += &format!("dataset source {name}: {storage}\n");
    }
    out
}

fn print_probe(mib: u64) -> Result<(), String> {
    let probe = crate::runtime::gpu_check::probe(mib);
    println!(
        "{}",
        serde_json::to_string(&probe).expect("a probe is JSON")
    );
    Ok(())
}

/// `check-config`: the configuration loaded (else `main` said why); what it sets up.
fn check_config(config: &Config) -> Result<(), String> {
    print!("{}", config_summary(config));
    Ok(())
}

async fn dispatch(command: Command, config: Config) -> Result<(), String> {
    match command {
        Command::Serve => serve(config).await,
        Command::GpuCheck { slice_mib } => {
            let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
            let report = tokio::task::spawn_blocking(move || {
                crate::runtime::gpu_check::run(&config, slice_mib, &exe)
            })
            .await
            .map_err(|e| e.to_string())?;
            print!("{}", report.text());
            if report.passed() {
                Ok(())
            } else {
                Err("the GPU check failed (see above)".into())
            }
        }
        Command::GpuProbe { mib, .. } => print_probe(mib),
        Command::CheckConfig => check_config(&config),
        Command::Migrate => {
            crate::util::private_dir(&config.data_dir).map_err(|e| {
                format!("cannot create data_dir {}: {e}", config.data_dir.display())
            })?;
            let store = crate::store::Store::connect(&config.database_url())
                .await
                .map_err(|e| e.to_string())?;
            store.migrate().await.map_err(|e| e.to_string())?;
            println!("migrations applied");
            Ok(())
        }
        Command::User {
            command:
                UserCommand::Add {
                    name,
                    admin,
                    password_stdin,
                },
        } => {
            let service = crate::boot::open_service(config)
                .await
                .map_err(|e| e.to_string())?;
            let (password, generated) = password_to_set(password_stdin)?;
            let role = if admin { Role::Admin } else { Role::User };
            let user = service
                .accounts
                .create_user(&name, Some(&password), role, None)
                .await
                .map_err(|e| e.to_string())?;
            if generated {
                println!(
                    "created {} ({}) with password: {password}",
                    user.name,
                    role.as_str()
                );
            } else {
                println!("created {} ({})", user.name, role.as_str());
            }
            Ok(())
        }
        Command::User {
            command:
                UserCommand::Passwd {
                    name,
                    password_stdin,
                },
        } => {
            let service = crate::boot::open_service(config)
                .await
                .map_err(|e| e.to_string())?;
            let (password, generated) = password_to_set(password_stdin)?;
            service
                .accounts
                .set_password(&name, &password)
                .await
                .map_err(|e| match e {
                    app::error::AppError::NotFound => format!("no user named {name}"),
                    e => e.to_string(),
                })?;
            if generated {
                println!("{name}'s new password: {password}");
            } else {
                println!("{name}'s password is set");
            }
            Ok(())
        }
        Command::User {
            command: UserCommand::Link { name, identity },
        } => {
            let service = crate::boot::open_service(config)
                .await
                .map_err(|e| e.to_string())?;
            let user = user_named(&service, &name).await?;
            service
                .accounts
                .link_identity(&user.id, &identity)
                .await
                .map_err(|e| e.to_string())?;
            println!("{name} now signs in as {identity} too");
            Ok(())
        }
        Command::User {
            command: command @ (UserCommand::Lock { .. } | UserCommand::Unlock { .. }),
        } => {
            let (name, locked) = match command {
                UserCommand::Lock { name } => (name, true),
                UserCommand::Unlock { name } => (name, false),
                UserCommand::Add { .. } | UserCommand::Link { .. } | UserCommand::Passwd { .. } => {
                    unreachable!("matched above")
                }
            };
            let service = crate::boot::open_service(config)
                .await
                .map_err(|e| e.to_string())?;
            let user = user_named(&service, &name).await?;
            service
                .accounts
                .set_locked(&user.id, locked, None)
                .await
                .map_err(|e| e.to_string())?;
            println!("{name} is {}", if locked { "locked" } else { "unlocked" });
            Ok(())
        }
        Command::Token { command } => {
            let service = crate::boot::open_service(config)
                .await
                .map_err(|e| e.to_string())?;
            match command {
                TokenCommand::Create {
                    user,
                    days,
                    label,
                    scopes,
                } => {
                    let viewer = user_named(&service, &user).await?.viewer(Scopes::ALL);
                    let made = service
                        .accounts
                        .create_token(&viewer, &label, scopes, days)
                        .await
                        .map_err(|e| e.to_string())?;
                    println!("{}", made.token);
                }
                TokenCommand::List { user } => {
                    let viewer = user_named(&service, &user).await?.viewer(Scopes::ALL);
                    let tokens = service
                        .accounts
                        .tokens(&viewer)
                        .await
                        .map_err(|e| e.to_string())?;
                    let day = |ms: i64| {
                        time::OffsetDateTime::from_unix_timestamp(ms / 1000)
                            .map(|t| t.date().to_string())
                            .unwrap_or_default()
                    };
                    for token in tokens {
                        let expires = token.expires_at.map_or("never".to_string(), day);
                        println!(
                            "{}  {}  scopes {}  created {}  expires {expires}",
                            token.id,
                            token.label,
                            token.scopes.to_string().replace(' ', ","),
                            day(token.created_at)
                        );
                    }
                }
                TokenCommand::Revoke { user, id } => {
                    let viewer = user_named(&service, &user).await?.viewer(Scopes::ALL);
                    service
                        .accounts
                        .revoke_token(&viewer, &id)
                        .await
                        .map_err(|e| match e {
                            app::error::AppError::NotFound => format!("{user} has no token {id}"),
                            other => other.to_string(),
                        })?;
                    println!("revoked {id}");
                }
            }
            Ok(())
        }
        Command::Credits {
            command: CreditsCommand::Grant { name, amount },
        } => {
            let service = crate::boot::open_service(config)
                .await
                .map_err(|e| e.to_string())?;
            let record = user_named(&service, &name).await?;
            let balance = service
                .admin
                .grant_credits(None, &record.id, &amount, "")
                .await
                .map_err(|e| e.to_string())?;
            println!("{name} now has {} credits", credits::format(balance));
            Ok(())
        }
        Command::Quota {
            command:
                QuotaCommand::Set {
                    name,
                    max_sessions,
                    max_gpu_mib,
                    max_minutes,
                    max_disk_mib,
                },
        } => {
            let service = crate::boot::open_service(config)
                .await
                .map_err(|e| e.to_string())?;
            let record = user_named(&service, &name).await?;
            let overrides = app::domain::quota::Overrides {
                max_sessions,
                max_gpu_mib,
                max_minutes,
                max_disk_mib,
            };
            let limits = service
                .admin
                .replace_quota(None, &record.id, &overrides)
                .await
                .map_err(|e| e.to_string())?;
            println!(
                "{name}: {} sessions, {} MiB of GPU memory, {} minutes per session, {} MiB of workspace",
                limits.max_sessions, limits.max_gpu_mib, limits.max_minutes, limits.max_disk_mib
            );
            Ok(())
        }
    }
}

/// The password read from stdin (its line end dropped), or one made here: (it, whether made).
fn password_to_set(from_stdin: bool) -> Result<(String, bool), String> {
    if from_stdin {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| e.to_string())?;
        Ok((text.trim_end_matches(['\r', '\n']).to_string(), false))
    } else {
        Ok((crate::identity::auth::random_secret(9), true))
    }
}

async fn serve(config: Config) -> Result<(), String> {
    let mut shutdown =
        Box::pin(shutdown_signal().map_err(|e| format!("cannot listen for signals: {e}"))?);
    let listen = config.listen_addr();
    let data_dir = config.data_dir.clone();
    // Start-up adopts or stops the editors it finds: two servers on one data directory would
    // each stop the other's.
    let _lock = {
        let data_dir = data_dir.clone();
        tokio::task::spawn_blocking(move || lock_data_dir(&data_dir))
            .await
            .map_err(|e| e.to_string())??
    };
    let service = tokio::select! {
        built = crate::boot::build_service(config) => built.map_err(|e| e.to_string())?,
        _ = &mut shutdown => return Err("stopped during start-up".into()),
    };
    if let Some(password) = service
        .accounts
        .ensure_admin()
        .await
        .map_err(|e| e.to_string())?
    {
        let file = data_dir.join("initial-admin-password");
        println!("\n  First run: created the account 'admin' with password: {password}");
        match save_private(&file, &format!("{password}\n")) {
            Ok(()) => println!("  (also saved in {})\n", file.display()),
            Err(e) => eprintln!("  (could not save it in {}: {e})\n", file.display()),
        }
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let bound = listener.local_addr().unwrap_or(listen);
    println!("  GPU Sandbox is serving on http://{bound}");
    crate::http::run(listener, service, shutdown)
        .await
        .map_err(|e| e.to_string())
}

/// Writes a file only its owner can read, from the moment it exists (and one that existed
/// already is made so before it is written).
fn save_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())
}

/// Holds `data_dir/server.lock` for as long as the returned file lives; another `serve` on the
/// same directory is refused with a clear message.
fn lock_data_dir(data_dir: &std::path::Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    crate::util::private_dir(data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let path = data_dir.join("server.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // A server killed while it started editors leaves children between fork and exec for a
    // moment, each holding a copy of the lock until its exec closes it: a restart right after
    // a crash waits that moment out; a server that runs holds it for good.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        // SAFETY: flock on a descriptor this function owns; released when the file is closed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "another server is already running on the data directory {}",
                data_dir.display()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Ctrl-C or SIGTERM, listened for from the moment this returns: a signal that comes while the
/// server is still starting is kept for it, rather than killing it before it can clean up.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {},
            _ = interrupt.recv() => {},
        }
        tracing::info!("shutting down");
    })
}

/// The account called `name`, or the error the command line prints.
async fn user_named(
    service: &crate::service::Service,
    name: &str,
) -> Result<crate::store::UserRecord, String> {
    service
        .accounts
        .user_named(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no user named '{name}'"))
}
