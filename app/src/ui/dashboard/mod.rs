use super::ErrorNotice;
#[cfg(feature = "ssr")]
use super::chips::HoldChip;
use super::chips::StateChip;
use super::format::{format_countdown, use_clock};
use super::hydration::page_resource;
use crate::api::{Launch, Logout, load_dashboard};
use crate::domain::credits;
use crate::domain::launch::{self, EditorKind};
use crate::domain::pool::format_mib;
use crate::domain::session::SessionState;
use crate::model::{
    CreditsView, DashboardPage, DurationLimits, EditorOption, ImageChoice, QuotaView, SessionView,
    SliceOption, Viewer,
};
#[cfg(feature = "ssr")]
use crate::model::{Dashboard, GpuView};
use leptos::prelude::*;
use leptos::server_fn::ServerFn;
use leptos_router::hooks::use_navigate;

mod cards;

use cards::*;

#[component]
pub fn DashboardPage() -> impl IntoView {
    let data = page_resource(|| (), |_| load_dashboard());
    view! {
        <leptos_meta::Title text="Dashboard · GPU Sandbox" />
        <Suspense fallback=|| view! { <p class="muted pad">"Loading your dashboard…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <DashboardView data=d /> }.into_any(),
                    Err(error) => view! { <ErrorNotice error /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// The dashboard for its page: the parts that only show drawn here, on the server, so that the
/// browser loads no code for them; its reloads bring them drawn anew.
#[cfg(feature = "ssr")]
pub fn dashboard_page(data: Dashboard, promotions: crate::model::Promotions) -> DashboardPage {
    let costs: Vec<(String, i64)> = data
        .sessions
        .iter()
        .filter_map(|s| {
            let cost = s.cost?;
            Some((
                format!(
                    "{} · {} UTC",
                    s.editor.label(),
                    crate::domain::dates::minute(s.created_at_ms)
                ),
                cost.charged,
            ))
        })
        .take(10)
        .collect();
    let draw = |view: AnyView| Owner::new().with(|| view.to_html());
    let spending = draw(
        view! {
            <super::charts::BalanceLine points=data.balance_days />
            <h3>"What you held and what you used"</h3>
            <super::charts::UsageDays days=data.usage_days testid="my-usage-days" />
            {(!costs.is_empty())
                .then(|| {
                    view! {
                        <super::charts::CostBars
                            items=costs
                            testid="session-costs"
                            caption="What your last sessions cost, dearest first.".to_string()
                        />
                    }
                })}
        }
        .into_any(),
    );
    let history = if data.history.is_empty() {
        String::new()
    } else {
        draw(view! { <CreditHistory history=data.history /> }.into_any())
    };
    let pool = draw(view! { <PoolStrip gpus=data.gpus enforcement=data.enforcement /> }.into_any());
    let past: Vec<SessionView> = data
        .sessions
        .iter()
        .filter(|s| !s.state.is_live())
        .take(10)
        .cloned()
        .collect();
    let recent = if past.is_empty() {
        String::new()
    } else {
        draw(
            past.into_iter()
                .map(|session| view! { <PastSessionCard session /> })
                .collect_view()
                .into_any(),
        )
    };
    let promotions = if promotions.enabled {
        draw(view! { <super::promotion::PromotionsDrawn promotions /> }.into_any())
    } else {
        String::new()
    };
    DashboardPage {
        viewer: data.viewer,
        credits: data.credits,
        editors: data.editors,
        slices: data.slices,
        durations: data.durations,
        sessions: data.sessions,
        quota: data.quota,
        isolation_warning: data.isolation_warning,
        images: data
            .images
            .into_iter()
            .map(|i| crate::model::ImageChoice {
                id: i.id,
                editor: i.editor,
                label: i.label,
                reference: i.reference,
            })
            .collect(),
        datasets: Vec::new(),
        drawn: crate::model::DashboardDrawn {
            spending,
            history,
            pool,
            promotions,
            recent,
            backups: String::new(),
        },
    }
}

/// What the launch form offers and allows: the user's limits and use, each size's free count,
/// warm editors and queue. Reloaded with the sessions list, so that a Stop frees Launch at once.
#[derive(Clone, Debug, PartialEq)]
struct Offer {
    editors: Vec<EditorOption>,
    slices: Vec<SliceOption>,
    durations: DurationLimits,
    images: Vec<ImageChoice>,
    quota: QuotaView,
}

impl Offer {
    fn of(page: &DashboardPage) -> Self {
        Self {
            editors: page.editors.clone(),
            slices: page.slices.clone(),
            durations: page.durations.clone(),
            images: page.images.clone(),
            quota: page.quota.clone(),
        }
    }

    /// Each size as this user may launch it now.
    fn sizes(&self) -> Vec<Size> {
        let QuotaView { limits, usage, .. } = &self.quota;
        let size = |s: &SliceOption| Size {
            mib: s.slice_mib,
            free: s.free > 0,
            refused: launch::slice_refusal(limits, usage, s.slice_mib),
        };
        self.slices.iter().map(size).collect()
    }

    /// The size of `mib` as offered now.
    fn slice(&self, mib: u64) -> Option<&SliceOption> {
        self.slices.iter().find(|s| s.slice_mib == mib)
    }
}

#[component]
fn DashboardView(data: DashboardPage) -> impl IntoView {
    let offer = RwSignal::new(Offer::of(&data));
    let DashboardPage {
        viewer,
        credits,
        sessions,
        isolation_warning,
        drawn,
        datasets,
        ..
    } = data;
    #[cfg(feature = "hydrate")]
    let live: Vec<SessionView> = sessions
        .iter()
        .filter(|s| s.state.is_live())
        .cloned()
        .collect();
    // The lists, the balance and what the launch form offers follow what happens elsewhere (a
    // stop through the API, an admin, the reaper, the queue moving): each live session's event
    // stream, and a reload every 15 s for what no stream of this page carries. What was typed
    // into the launch form stays.
    let listed = RwSignal::new(sessions);
    let balance_now = RwSignal::new(credits);
    let drawn = RwSignal::new(drawn);
    #[cfg(feature = "hydrate")]
    let reload = reloader(listed, balance_now, drawn, offer);
    #[cfg(feature = "hydrate")]
    follow_dashboard(&live, reload);
    let refresh_now = move || {
        #[cfg(feature = "hydrate")]
        reload();
    };
    let refresh = move |_: leptos::ev::MouseEvent| refresh_now();
    #[cfg(feature = "hydrate")]
    {
        let ready: Vec<&SessionView> = live
            .iter()
            .filter(|s| s.state == SessionState::Ready)
            .collect();
        let ids: Vec<String> = ready.iter().map(|s| s.id.clone()).collect();
        // Each session's idle deadline, as the latest beat answered it.
        let warnings = std::rc::Rc::new(std::cell::RefCell::new(
            ready
                .iter()
                .map(|s| (s.id.clone(), s.idle_at_ms, s.warn_ms))
                .collect::<Vec<_>>(),
        ));
        let answered = warnings.clone();
        super::presence::use_presence(
            move || ids.clone(),
            move |now| {
                warnings
                    .borrow()
                    .iter()
                    .any(|(_, at, warn)| super::presence::in_idle_warning(now, *at, *warn))
            },
            move |view: SessionView| {
                for (id, at, warn) in answered.borrow_mut().iter_mut() {
                    if *id == view.id {
                        (*at, *warn) = (view.idle_at_ms, view.warn_ms);
                    }
                }
            },
        );
    }
    let balance = Signal::derive(move || balance_now.with(|c| c.balance));
    view! {
        <Header viewer credits=balance_now />
        <main class="dashboard">
            <h1 class="sr-only">"Your dashboard"</h1>
            {isolation_warning
                .map(|warning| {
                    view! {
                        <p class="banner warn" role="alert" data-testid="isolation-warning">
                            {warning}
                        </p>
                    }
                })}
            <section class="card launch-card" aria-labelledby="launch-title">
                <h2 id="launch-title">"Launch a workspace"</h2>
                {move || {
                    offer
                        .with(|o| o.quota.note.clone())
                        .map(|note| view! { <p class="notice warn" data-testid="quota-note">{note}</p> })
                }}
                <p class="muted" data-testid="quota">
                    {move || {
                        offer
                            .with(|o| {
                                let QuotaView { limits, usage, .. } = &o.quota;
                                format!(
                                    "Your limits: {} sessions ({} in use), {} of GPU memory ({} held), {} min per session.",
                                    limits.max_sessions,
                                    usage.sessions,
                                    format_mib(limits.max_gpu_mib),
                                    format_mib(usage.gpu_mib),
                                    limits.max_minutes,
                                )
                            })
                    }}
                </p>
                {(!datasets.is_empty())
                    .then(|| {
                        view! {
                            <p class="muted" data-testid="datasets">
                                {format!("Datasets, read-only in ~/datasets: {}", datasets.join(", "))}
                            </p>
                        }
                    })}
                <LaunchForm offer balance />
            </section>
            <section class="sessions" aria-labelledby="sessions-title">
                <h2 id="sessions-title">"Your sessions"</h2>
                {move || {
                    let live: Vec<SessionView> = listed
                        .get()
                        .into_iter()
                        .filter(|s| s.state.is_live())
                        .collect();
                    if live.is_empty() {
                        view! {
                            <p class="muted empty">
                                "No session is running. Pick an editor and a slice, then press Launch."
                            </p>
                        }
                            .into_any()
                    } else {
                        view! {
                            <ul class="session-list" data-testid="live-sessions">
                                {live
                                    .into_iter()
                                    .map(|s| view! { <SessionCard session=s after_stop=refresh_now /> })
                                    .collect_view()}
                            </ul>
                        }
                            .into_any()
                    }
                }}
                <Show when=move || drawn.with(|d| !d.recent.is_empty())>
                    <details class="history">
                        <summary>"Recent sessions"</summary>
                        <ul class="session-list" inner_html=move || drawn.with(|d| d.recent.clone())></ul>
                    </details>
                </Show>
                <div class="spending" inner_html=move || drawn.with(|d| d.spending.clone())></div>
                <Show when=move || drawn.with(|d| !d.history.is_empty())>
                    <details class="history" data-testid="credit-history">
                        <summary>"Credit history"</summary>
                        <div inner_html=move || drawn.with(|d| d.history.clone())></div>
                    </details>
                </Show>
            </section>
            <super::credit_ask::AskForCreditsCard credits_now=balance_now />
            <Show when=move || drawn.with(|d| !d.promotions.is_empty())>
                <section class="card promotions" id="promotions" aria-labelledby="promotions-title">
                    <h2 id="promotions-title">
                        "Your promotions" <button class="link" on:click=refresh>
                            "Refresh"
                        </button>
                    </h2>
                    <div inner_html=move || drawn.with(|d| d.promotions.clone())></div>
                </section>
            </Show>
            <Show when=move || drawn.with(|d| !d.backups.is_empty())>
                <section class="card backups" id="workspace" aria-labelledby="workspace-title">
                    <h2 id="workspace-title">"Your workspace"</h2>
                    <div inner_html=move || drawn.with(|d| d.backups.clone())></div>
                </section>
            </Show>
            <section
                class="pool"
                aria-labelledby="pool-title"
                inner_html=move || drawn.with(|d| d.pool.clone())
            ></section>
        </main>
    }
}

/// Loads the dashboard anew into its lists, balance, drawn parts and launch offer.
#[cfg(feature = "hydrate")]
fn reloader(
    listed: RwSignal<Vec<SessionView>>,
    balance: RwSignal<CreditsView>,
    drawn: RwSignal<crate::model::DashboardDrawn>,
    offer: RwSignal<Offer>,
) -> impl Fn() + Copy + 'static {
    move || {
        leptos::task::spawn_local(async move {
            if let Ok(fresh) = load_dashboard().await {
                super::hydration::after_hydration(move || {
                    // Set only when it changed: the launch form's parts read it directly, with
                    // no memo of their own (each memo's type costs the bundle about 0.5 KB).
                    let new_offer = Offer::of(&fresh);
                    if offer.with_untracked(|o| *o != new_offer) {
                        offer.set(new_offer);
                    }
                    listed.set(fresh.sessions);
                    balance.set(fresh.credits);
                    drawn.set(fresh.drawn);
                });
            }
        });
    }
}

/// Keeps the dashboard current: reloaded when one of the live sessions' streams says it became
/// ready or ended, and every 15 s.
#[cfg(feature = "hydrate")]
fn follow_dashboard(live: &[SessionView], reload: impl Fn() + Copy + 'static) {
    let streams: Vec<super::live::Follow> = live
        .iter()
        .map(|s| {
            super::live::follow(&s.id, move |step| {
                if matches!(step.state, SessionState::Ready | SessionState::Ended) {
                    reload();
                }
            })
        })
        .collect();
    let streams = send_wrapper::SendWrapper::new(streams);
    on_cleanup(move || streams.iter().for_each(super::live::Follow::close));
    if let Ok(handle) = set_interval_with_handle(reload, std::time::Duration::from_secs(15)) {
        on_cleanup(move || handle.clear());
    }
}

/// A size as the launch form offers it to this user now.
#[derive(Clone, Debug, PartialEq)]
struct Size {
    mib: u64,
    free: bool,
    /// Why this user's quota refuses it whatever the duration: shown, greyed, with the reason.
    refused: Option<String>,
}

/// The size a launch takes: the one `chosen` while the quota allows it, otherwise the first
/// allowed with a free slice, then the first allowed (it queues), then the first offered.
fn slice_to_launch(sizes: &[Size], chosen: Option<u64>) -> u64 {
    let allowed = |mib: u64| sizes.iter().any(|s| s.mib == mib && s.refused.is_none());
    chosen
        .filter(|mib| allowed(*mib))
        .or_else(|| {
            sizes
                .iter()
                .find(|s| s.free && s.refused.is_none())
                .or(sizes.iter().find(|s| s.refused.is_none()))
                .or(sizes.first())
                .map(|s| s.mib)
        })
        .unwrap_or_default()
}

/// The launch form. What it offers follows `offer` (each part drawn anew only when it changes);
/// what was typed and chosen stays.
#[component]
fn LaunchForm(
    offer: RwSignal<Offer>,
    /// Milli-credits the user may spend now.
    balance: Signal<i64>,
) -> impl IntoView {
    let launch = ServerAction::<Launch>::new();
    // Plain reads of the offer, which the reloads set only when it changed.
    let editors = move || offer.with(|o| o.editors.clone());
    let durations = move || offer.with(|o| o.durations.clone());
    let quota = move || offer.with(|o| (o.quota.limits, o.quota.usage));
    // An approved image's id, or empty for the editor's default.
    let image = RwSignal::new(String::new());
    let first_editor = offer.with_untracked(|o| {
        o.editors
            .iter()
            .find(|e| e.unavailable.is_none())
            .map(|e| e.kind)
            .unwrap_or(EditorKind::JupyterLab)
    });
    let sizes = move || offer.with(Offer::sizes);
    let editor = RwSignal::new(first_editor);
    // The size clicked, kept while the quota allows it (a Stop can make it allowed again).
    let chosen = RwSignal::new(None::<u64>);
    let slice = move || slice_to_launch(&sizes(), chosen.get());
    // The field as typed: an empty or broken one is said so, never launched as a default.
    let typed = RwSignal::new(offer.with_untracked(|o| {
        o.durations
            .default_minutes
            .min(o.quota.limits.max_minutes)
            .max(o.durations.min_minutes)
            .to_string()
    }));
    // Plain closures, not memos, for the same reason: what they compute is cheap.
    let choice = move || {
        let mib = slice();
        let DurationLimits {
            min_minutes,
            max_minutes: longest,
            ..
        } = durations();
        let (price_per_hour, max_minutes) = offer.with(|o| {
            o.slice(mib)
                .map_or((0, longest), |s| (s.price_per_hour, s.max_minutes))
        });
        let (limits, usage) = quota();
        launch::FormChoice {
            slice_mib: mib,
            minutes: launch::read_minutes(&typed.get()),
            min_minutes,
            max_minutes,
            price_per_hour,
            balance: balance.get(),
            limits,
            usage,
        }
    };
    let max_minutes = move || choice().longest();
    let refusal = move || launch::form_refusal(&choice());

    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(session)) = launch.value().get() {
            navigate(&format!("/sessions/{}", session.id), Default::default());
        }
    });
    let idle = super::idle_field::IdleField::default();
    // The idle timeouts the size chosen now allows.
    let idle_choice_of = move |mib| {
        offer.with_untracked(|o| o.slice(mib).map(|s| s.idle_choice).unwrap_or_default())
    };
    let idle_choice = move || idle_choice_of(slice());
    let idle_choice_now = move || idle_choice_of(untrack(slice));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let Ok(minutes) = untrack(choice).minutes else {
            return;
        };
        if untrack(refusal).is_some() {
            return;
        }
        let Some(idle_minutes) = idle.checked(idle_choice_now()) else {
            return;
        };
        launch.dispatch(Launch {
            editor: editor.get_untracked().as_str().to_string(),
            slice_mib: untrack(slice),
            duration_minutes: minutes,
            idle_minutes,
            // A choice made for another editor does not carry over.
            image: Some(image.get_untracked()).filter(|id| {
                offer.with_untracked(|o| {
                    o.images
                        .iter()
                        .any(|i| i.id.as_ref() == Some(id) && i.editor == editor.get_untracked())
                })
            }),
        });
    };
    // Only where the runtime runs images (Kubernetes): the editor's approved ones.
    let image_choice = move || {
        let kind = editor.get();
        let offered: Vec<ImageChoice> = offer.with(|o| {
            o.images
                .iter()
                .filter(|i| i.editor == kind)
                .cloned()
                .collect()
        });
        if offered.is_empty() {
            return None;
        }
        Some(view! {
            <label class="image">
                "Image"
                <select name="image" on:change=move |ev| image.set(event_target_value(&ev))>
                    <option value="" selected=move || image.get().is_empty()>
                        "Default"
                    </option>
                    {offered
                        .into_iter()
                        .filter_map(|i| {
                            let id = i.id?;
                            let selected = id.clone();
                            Some(view! {
                                <option value=id.clone() selected=move || image.get() == selected>
                                    {format!("{} ({})", i.label, i.reference)}
                                </option>
                            })
                        })
                        .collect_view()}
                </select>
            </label>
        })
    };
    view! {
        <form class="launch" on:submit=submit data-testid="launch-form">
            <fieldset>
                <legend>"Editor"</legend>
                <div class="choices">
                    {move || editors()
                        .into_iter()
                        .map(|e| {
                            let kind = e.kind;
                            let disabled = e.unavailable.is_some();
                            let why = e.unavailable.clone();
                            view! {
                                <label class="choice" class:disabled=disabled title=why>
                                    <input
                                        type="radio"
                                        name="editor"
                                        value=kind.as_str()
                                        disabled=disabled
                                        prop:checked=move || editor.get() == kind
                                        on:change=move |_| editor.set(kind)
                                    />
                                    <span class=format!("icon icon-{}", kind.as_str()) aria-hidden="true"></span>
                                    <span>{e.label}</span>
                                    {e.unavailable.map(|why| view! { <small class="muted">{why}</small> })}
                                </label>
                            }
                        })
                        .collect_view()}
                </div>
            </fieldset>
            <fieldset>
                <legend>"GPU slice"</legend>
                <div class="choices">
                    {move || offer.with(|o| o.slices.clone())
                        .into_iter()
                        .map(|s| {
                            let mib = s.slice_mib;
                            let hold = s.hold;
                            let label = if s.burst {
                                format!("Whole GPU · {}", format_mib(mib))
                            } else {
                                format_mib(mib)
                            };
                            let mut notes = vec![
                                credits::per_hour(s.price_per_hour),
                                if s.burst {
                                    format!("{} of {} cards free · up to {} min", s.free, s.total, s.max_minutes)
                                } else {
                                    format!("{} of {} free", s.free, s.total)
                                },
                            ];
                            if let Some(resources) = &s.resources {
                                notes.insert(0, resources.clone());
                            }
                            let warm: u32 = s.warm.iter().map(|(_, n)| n).sum();
                            if warm > 0 {
                                notes.push(format!("{warm} ready instantly"));
                            }
                            if s.free == 0 {
                                notes.push(format!("{} waiting: you will queue", s.queued));
                            }
                            // Plain words here: the chip and its sentence stay out of this chunk.
                            notes.push(hold.label().to_string());
                            let why = sizes().into_iter().find(|z| z.mib == mib).and_then(|z| z.refused);
                            let disabled = why.is_some();
                            view! {
                                <label class="choice" class:disabled=disabled data-testid="slice-choice">
                                    <input
                                        type="radio"
                                        name="slice"
                                        value=mib.to_string()
                                        disabled=disabled
                                        prop:checked=move || slice() == mib
                                        on:change=move |_| chosen.set(Some(mib))
                                    />
                                    <span>{label}</span>
                                    <small class="muted">{notes.join(" · ")}</small>
                                    {why.map(|why| view! { <small class="why" data-testid="slice-refused">{why}</small> })}
                                </label>
                            }
                        })
                        .collect_view()}
                </div>
            </fieldset>
            {image_choice}
            <label class="duration">
                "Duration (minutes)"
                // Text, not a number field: a number field reads a half-typed `-` or `1e` as
                // empty, and writing that back erased the keystroke (`-5` became 5).
                <input
                    type="text"
                    name="duration_minutes"
                    inputmode="numeric"
                    autocomplete="off"
                    required
                    aria-invalid=move || choice().minutes.is_err().to_string()
                    prop:value=move || typed.get()
                    on:input=move |ev| typed.set(event_target_value(&ev))
                    on:change=move |_| {
                        // Past the longest for this size: brought back to it, and said so below.
                        if let Ok(m) = launch::read_minutes(&typed.get_untracked())
                            && m > untrack(choice).longest()
                        {
                            typed.set(untrack(choice).longest().to_string());
                        }
                    }
                />
                <small class="muted">
                    {move || format!(
                        "{} to {} minutes for this size",
                        durations().min_minutes, max_minutes(),
                    )}
                </small>
            </label>
            {idle.view(idle_choice)}
            <div class="launch-footer">
                <span data-testid="launch-total">
                    {move || match choice().hold() {
                        Some(hold) => view! {
                            "Holds " <strong>{credits::format(hold)}</strong>
                            {format!(
                                " {} now; unused minutes come back when it ends",
                                credits::unit(hold)
                            )}
                        }
                            .into_any(),
                        None => view! { "Holds nothing until a duration is entered" }.into_any(),
                    }}
                </span>
                <button
                    type="submit"
                    class="primary"
                    disabled=move || launch.pending().get() || refusal().is_some()
                    title=move || refusal().unwrap_or_default()
                >
                    {move || if launch.pending().get() { "Launching…" } else { "Launch" }}
                </button>
            </div>
            // The idle timeout's refusal too, once a submit found one (the field is read then).
            {move || {
                refusal()
                    .or_else(|| idle.refused())
                    .map(|why| view! { <p class="muted why" data-testid="launch-refused">{why}</p> })
            }}
            {move || {
                launch
                    .value()
                    .get()
                    .and_then(Result::err)
                    .map(|error| view! { <crate::ui::Refusal error /> })
            }}
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(mib: u64, free: bool, refused: Option<&str>) -> Size {
        let refused = refused.map(str::to_string);
        Size { mib, free, refused }
    }

    #[test]
    fn a_launch_takes_the_size_clicked_while_the_quota_allows_it() {
        let allowed = [
            size(49152, true, Some("16 GB at once")),
            size(16384, false, None),
            size(8192, true, None),
        ];
        assert_eq!(slice_to_launch(&allowed, None), 8192, "a free one first");
        assert_eq!(slice_to_launch(&allowed, Some(16384)), 16384, "it queues");
        // At the session limit every size is refused; a Stop lifts it and the choice is back.
        let full = allowed.clone().map(|s| Size {
            refused: Some("Stop one first.".into()),
            ..s
        });
        assert_eq!(slice_to_launch(&full, Some(16384)), 49152);
        assert_eq!(slice_to_launch(&allowed, Some(16384)), 16384);
        assert_eq!(slice_to_launch(&full, None), 49152);
        assert_eq!(
            slice_to_launch(&allowed, None),
            8192,
            "not the refused one shown"
        );
    }
}
