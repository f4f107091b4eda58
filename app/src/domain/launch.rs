//! What may be launched: editors, slice sizes and durations.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EditorKind {
    #[serde(rename = "jupyterlab")]
    JupyterLab,
    #[serde(rename = "marimo")]
    Marimo,
    #[serde(rename = "code-server")]
    CodeServer,
}

impl EditorKind {
    pub const ALL: [EditorKind; 3] = [Self::JupyterLab, Self::Marimo, Self::CodeServer];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::JupyterLab => "jupyterlab",
            Self::Marimo => "marimo",
            Self::CodeServer => "code-server",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::JupyterLab => "JupyterLab",
            Self::Marimo => "marimo",
            Self::CodeServer => "VS Code (code-server)",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// Where the editor's UI starts, below the session's proxy prefix.
    pub fn landing_path(self) -> &'static str {
        match self {
            Self::JupyterLab => "lab",
            Self::Marimo | Self::CodeServer => "",
        }
    }
}

impl fmt::Display for EditorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A launch as asked for, before any check. A field it does not know is refused, not ignored:
/// a misspelt `duration_minutes` must not launch for the default time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchRequest {
    pub editor: String,
    pub slice_mib: u64,
    pub duration_minutes: u32,
    /// An approved image's id (Kubernetes only); absent: the editor's configured image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The idle timeout the person chose, in minutes, within the size's bounds; absent: the
    /// size's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_minutes: Option<u32>,
}

/// An approved image a launch may name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageChoice {
    pub id: String,
    pub editor: EditorKind,
    pub reference: String,
    /// Why the scan policy keeps it from launching now; None: it may.
    pub blocked: Option<String>,
}

/// What the pool and configuration offer right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalog {
    /// Editors that are installed; others are refused with their reason.
    pub editors: Vec<(EditorKind, Result<(), String>)>,
    pub slice_sizes: Vec<u64>,
    /// Whole cards (a slice of 100 %), by memory size: queued for a free card, held briefly.
    pub burst_sizes: Vec<u64>,
    pub burst_max_minutes: u32,
    pub min_minutes: u32,
    pub max_minutes: u32,
    /// Approved images; None where the runtime runs no images (local processes).
    pub images: Option<Vec<ImageChoice>>,
    /// The idle timeouts a person may choose, by size (slices and whole cards).
    pub idle_choices: Vec<(u64, super::idle::TimeoutChoice)>,
}

/// A launch that passed every check of the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidLaunch {
    /// The chosen image's reference; None for the configured default.
    pub image: Option<String>,
    pub editor: EditorKind,
    pub slice_mib: u64,
    pub duration_minutes: u32,
    pub burst: bool,
    /// The idle timeout chosen, in milliseconds; None for the size's default.
    pub idle_timeout_ms: Option<i64>,
}

/// Checks a launch against the catalog; the error is a sentence for the user.
pub fn validate(req: &LaunchRequest, catalog: &Catalog) -> Result<ValidLaunch, String> {
    let known: Vec<&str> = catalog.editors.iter().map(|(e, _)| e.as_str()).collect();
    let editor = EditorKind::parse(req.editor.trim()).ok_or_else(|| {
        format!(
            "unknown editor '{}'; choose one of: {}",
            super::encode::shown(&req.editor),
            known.join(", ")
        )
    })?;
    match catalog.editors.iter().find(|(e, _)| *e == editor) {
        None => return Err(format!("{} is not offered here", editor.label())),
        Some((_, Err(reason))) => {
            return Err(format!("{} is unavailable: {reason}", editor.label()));
        }
        Some((_, Ok(()))) => {}
    }
    let burst = !catalog.slice_sizes.contains(&req.slice_mib);
    if burst && !catalog.burst_sizes.contains(&req.slice_mib) {
        let sizes: Vec<String> = catalog
            .slice_sizes
            .iter()
            .chain(&catalog.burst_sizes)
            .map(|mib| format!("{mib} ({})", super::pool::format_mib(*mib)))
            .collect();
        return Err(format!(
            "there is no {} MiB slice; slice_mib must be one of: {}",
            req.slice_mib,
            sizes.join(", ")
        ));
    }
    if req.duration_minutes < catalog.min_minutes || req.duration_minutes > catalog.max_minutes {
        return Err(format!(
            "duration must be between {} and {} minutes, not {}",
            catalog.min_minutes, catalog.max_minutes, req.duration_minutes
        ));
    }
    if burst && req.duration_minutes > catalog.burst_max_minutes {
        return Err(format!(
            "a whole GPU may be held for at most {} minutes, not {}",
            catalog.burst_max_minutes, req.duration_minutes
        ));
    }
    let image = match (req.image.as_deref().map(str::trim), &catalog.images) {
        (None | Some(""), _) => None,
        (Some(_), None) => {
            return Err(
                "this server runs editors as processes on its own machine: there is no image to choose"
                    .into(),
            );
        }
        (Some(id), Some(images)) => {
            let offered: Vec<&str> = images
                .iter()
                .filter(|i| i.editor == editor && i.blocked.is_none())
                .map(|i| i.id.as_str())
                .collect();
            match images.iter().find(|i| i.id == id) {
                Some(image) if image.editor == editor => match &image.blocked {
                    None => Some(image.reference.clone()),
                    Some(why) => {
                        return Err(format!("image `{id}` may not be launched now: {why}"));
                    }
                },
                Some(image) => {
                    return Err(format!(
                        "image `{id}` runs {}, not {}",
                        image.editor.label(),
                        editor.label()
                    ));
                }
                None => {
                    return Err(format!(
                        "no approved image `{id}` for {}; {}",
                        editor.label(),
                        if offered.is_empty() {
                            "it runs its default image only".to_string()
                        } else {
                            format!("choose one of: {}", offered.join(", "))
                        }
                    ));
                }
            }
        }
    };
    let idle_timeout_ms = catalog
        .idle_choices
        .iter()
        .find(|(mib, _)| *mib == req.slice_mib)
        .map(|(_, choice)| *choice)
        .unwrap_or_default()
        .choose(req.idle_minutes)?;
    Ok(ValidLaunch {
        image,
        editor,
        slice_mib: req.slice_mib,
        duration_minutes: req.duration_minutes,
        burst,
        idle_timeout_ms,
    })
}

/// What the launch form has chosen, and what bounds it: the form asks [`form_refusal`] before it
/// lets Launch be pressed, with the figures the server holds the launch to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FormChoice {
    pub slice_mib: u64,
    /// The duration typed, or why the field's text is not one.
    pub minutes: Result<u32, NotMinutes>,
    pub min_minutes: u32,
    /// The longest duration for this size (bursts are shorter).
    pub max_minutes: u32,
    /// Milli-credits per hour for this size.
    pub price_per_hour: i64,
    /// Milli-credits the user may spend now.
    pub balance: i64,
    pub limits: super::quota::Limits,
    pub usage: super::quota::Usage,
}

impl FormChoice {
    /// The longest duration the user may choose for this size: the size's and their own limit.
    pub fn longest(&self) -> u32 {
        self.max_minutes.min(self.limits.max_minutes)
    }

    /// What the launch holds, in milli-credits, when its duration is one.
    pub fn hold(&self) -> Option<i64> {
        self.minutes
            .ok()
            .map(|m| super::credits::price_for_minutes(self.price_per_hour, m as i64))
    }
}

/// Why a size cannot be launched by this user now, whatever the duration (their GPU memory
/// limit or their number of sessions); `None` when it can.
pub fn slice_refusal(
    limits: &super::quota::Limits,
    usage: &super::quota::Usage,
    slice_mib: u64,
) -> Option<String> {
    super::quota::check(limits, usage, slice_mib, 0).err()
}

/// Why the form's choice would be refused, in the words the form shows beside a disabled Launch;
/// `None` when the server would take it.
pub fn form_refusal(choice: &FormChoice) -> Option<String> {
    let longest = choice.longest();
    let minutes = match choice.minutes {
        Ok(minutes) => minutes,
        Err(NotMinutes::Empty) => {
            return Some(format!(
                "{}, {} to {longest}.",
                NotMinutes::Empty.words(),
                choice.min_minutes
            ));
        }
        Err(why) => {
            return Some(format!(
                "{}: enter {} to {longest} minutes.",
                why.words(),
                choice.min_minutes
            ));
        }
    };
    if minutes < choice.min_minutes || minutes > longest {
        return Some(format!(
            "Choose {} to {longest} minutes for this size.",
            choice.min_minutes
        ));
    }
    if let Some(refused) = slice_refusal(&choice.limits, &choice.usage, choice.slice_mib) {
        return Some(refused);
    }
    let hold = choice.hold().unwrap_or_default();
    if hold > choice.balance {
        return Some(format!(
            "This needs {} and you have {}: choose fewer minutes or a smaller slice, or ask an admin for credits.",
            super::credits::with_unit(hold),
            super::credits::format(choice.balance.max(0))
        ));
    }
    None
}

/// Why a field's text is not a number of minutes. The field keeps what was typed; the form says
/// this beside it and acts on nothing until it reads as whole minutes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotMinutes {
    Empty,
    Negative,
    Fraction,
    Exponent,
    NotDigits,
    TooLarge,
}

impl NotMinutes {
    /// What is wrong, as a sentence without its full stop.
    pub fn words(self) -> &'static str {
        match self {
            NotMinutes::Empty => "Enter a duration in whole minutes",
            NotMinutes::Negative => "A duration cannot be negative",
            NotMinutes::Fraction => "Whole minutes only, without a fraction",
            NotMinutes::Exponent => "Write the minutes out in digits (1000, not 1e3)",
            NotMinutes::NotDigits => "Minutes are digits only",
            NotMinutes::TooLarge => "More minutes than anyone can hold",
        }
    }
}

/// Minutes as typed: a whole number in digits (spaces around it allowed), or why not. Nothing
/// is guessed: `-5`, `1.5` and `1e3` are refused, not read as 5, 15 or 3.
pub fn read_minutes(text: &str) -> Result<u32, NotMinutes> {
    let text = text.trim();
    if text.is_empty() {
        return Err(NotMinutes::Empty);
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| NotMinutes::TooLarge);
    }
    let numeric = |t: &str| t.bytes().any(|b| b.is_ascii_digit());
    Err(if text.starts_with('-') && numeric(text) {
        NotMinutes::Negative
    } else if text.contains(['e', 'E']) && numeric(text) {
        NotMinutes::Exponent
    } else if text.contains(['.', ',']) && numeric(text) {
        NotMinutes::Fraction
    } else {
        NotMinutes::NotDigits
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice() -> FormChoice {
        FormChoice {
            slice_mib: 8192,
            minutes: Ok(60),
            min_minutes: 15,
            max_minutes: 480,
            price_per_hour: 2_000,
            balance: 100_000,
            limits: crate::domain::quota::Limits {
                max_sessions: 2,
                max_gpu_mib: 16384,
                max_minutes: 240,
                max_disk_mib: 10240,
            },
            usage: crate::domain::quota::Usage::default(),
        }
    }

    #[test]
    fn the_form_takes_what_the_server_takes() {
        assert_eq!(form_refusal(&choice()), None);
        assert_eq!(choice().hold(), Some(2_000));
        // Any whole minute in range, the user's own limit included.
        for minutes in [15, 16, 47, 240] {
            let c = FormChoice {
                minutes: Ok(minutes),
                ..choice()
            };
            assert_eq!(form_refusal(&c), None, "{minutes}");
        }
    }

    #[test]
    fn the_form_says_why_it_would_be_refused() {
        let empty = FormChoice {
            minutes: Err(NotMinutes::Empty),
            ..choice()
        };
        assert_eq!(
            form_refusal(&empty).as_deref(),
            Some("Enter a duration in whole minutes, 15 to 240.")
        );
        let long = FormChoice {
            minutes: Ok(241),
            ..choice()
        };
        assert_eq!(
            form_refusal(&long).as_deref(),
            Some("Choose 15 to 240 minutes for this size.")
        );
        let whole_card = FormChoice {
            slice_mib: 49152,
            max_minutes: 60,
            ..choice()
        };
        let refused = form_refusal(&whole_card).unwrap();
        assert!(refused.contains("16 GB of GPU memory"), "{refused}");
        let poor = FormChoice {
            balance: 1_000,
            ..choice()
        };
        let refused = form_refusal(&poor).unwrap();
        assert!(
            refused.starts_with("This needs 2 credits and you have 1:"),
            "{refused}"
        );
        let busy = FormChoice {
            usage: crate::domain::quota::Usage {
                sessions: 2,
                gpu_mib: 16384,
                disk_mib: None,
            },
            ..choice()
        };
        assert!(form_refusal(&busy).unwrap().contains("Stop one first"));
    }

    #[test]
    fn a_size_over_the_gpu_limit_is_refused_whatever_the_duration() {
        let c = choice();
        assert_eq!(slice_refusal(&c.limits, &c.usage, 16384), None);
        assert!(slice_refusal(&c.limits, &c.usage, 49152).is_some());
        let holding = crate::domain::quota::Usage {
            sessions: 1,
            gpu_mib: 8192,
            disk_mib: None,
        };
        assert_eq!(slice_refusal(&c.limits, &holding, 8192), None);
        assert!(slice_refusal(&c.limits, &holding, 16384).is_some());
    }

    #[test]
    fn only_whole_minutes_are_a_duration() {
        assert_eq!(read_minutes(" 45 "), Ok(45));
        for bad in ["", "  ", "4.5", "-5", "1e3", "45min", "99999999999"] {
            assert!(read_minutes(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn what_is_wrong_with_typed_minutes_is_named_never_guessed() {
        use NotMinutes::*;
        for (text, why) in [
            ("", Empty),
            ("   ", Empty),
            ("-5", Negative),
            ("-", NotDigits),
            ("1.5", Fraction),
            ("1,5", Fraction),
            (".5", Fraction),
            ("1e3", Exponent),
            ("1E3", Exponent),
            ("e", NotDigits),
            ("45min", NotDigits),
            ("+5", NotDigits),
            ("4 5", NotDigits),
            ("99999999999", TooLarge),
        ] {
            assert_eq!(read_minutes(text), Err(why), "{text:?}");
        }
        assert_eq!(read_minutes("007"), Ok(7));
        assert_eq!(read_minutes(" 1000 "), Ok(1000));
    }

    #[test]
    fn the_form_says_what_is_wrong_with_the_duration_and_the_range() {
        let mut c = choice();
        c.minutes = Err(NotMinutes::Negative);
        assert_eq!(
            form_refusal(&c).as_deref(),
            Some("A duration cannot be negative: enter 15 to 240 minutes.")
        );
        c.minutes = Err(NotMinutes::Empty);
        assert_eq!(
            form_refusal(&c).as_deref(),
            Some("Enter a duration in whole minutes, 15 to 240.")
        );
        assert_eq!(c.hold(), None);
    }

    fn catalog() -> Catalog {
        Catalog {
            editors: vec![
                (EditorKind::JupyterLab, Ok(())),
                (EditorKind::Marimo, Err("marimo is not installed".into())),
            ],
            slice_sizes: vec![8192],
            burst_sizes: vec![49152],
            burst_max_minutes: 60,
            min_minutes: 15,
            max_minutes: 480,
            images: None,
            idle_choices: vec![(
                8192,
                crate::domain::idle::TimeoutChoice {
                    min_minutes: 10,
                    max_minutes: 120,
                    default_minutes: 30,
                },
            )],
        }
    }

    fn req(editor: &str, slice_mib: u64, duration_minutes: u32) -> LaunchRequest {
        LaunchRequest {
            editor: editor.into(),
            slice_mib,
            duration_minutes,
            image: None,
            idle_minutes: None,
        }
    }

    #[test]
    fn a_chosen_idle_timeout_must_lie_within_the_sizes_bounds() {
        let with_idle = |mib: u64, minutes: u32| LaunchRequest {
            idle_minutes: Some(minutes),
            ..req("jupyterlab", mib, 60)
        };
        let valid = validate(&with_idle(8192, 90), &catalog()).unwrap();
        assert_eq!(valid.idle_timeout_ms, Some(90 * 60_000));
        assert_eq!(
            validate(&with_idle(8192, 121), &catalog()).unwrap_err(),
            "the idle timeout must be between 10 and 120 minutes for this size, not 121"
        );
        assert_eq!(
            validate(&req("jupyterlab", 8192, 60), &catalog())
                .unwrap()
                .idle_timeout_ms,
            None
        );
        // A size with no bounds given offers no choice.
        assert!(validate(&with_idle(49152, 30), &catalog()).is_err());
    }

    #[test]
    fn accepts_a_good_launch() {
        let ok = validate(&req("jupyterlab", 8192, 60), &catalog()).unwrap();
        assert_eq!(ok.editor, EditorKind::JupyterLab);
        assert_eq!(ok.duration_minutes, 60);
    }

    #[test]
    fn names_the_choices_for_an_unknown_editor() {
        let err = validate(&req("emacs", 8192, 60), &catalog()).unwrap_err();
        assert!(err.contains("unknown editor 'emacs'"), "{err}");
        assert!(err.contains("jupyterlab, marimo"), "{err}");
    }

    #[test]
    fn explains_an_unavailable_editor() {
        let err = validate(&req("marimo", 8192, 60), &catalog()).unwrap_err();
        assert!(err.contains("not installed"), "{err}");
        let err = validate(&req("code-server", 8192, 60), &catalog()).unwrap_err();
        assert!(err.contains("not offered"), "{err}");
    }

    #[test]
    fn refuses_a_slice_that_does_not_exist() {
        let err = validate(&req("jupyterlab", 1000, 60), &catalog()).unwrap_err();
        assert!(err.contains("8192 (8 GB)"), "{err}");
    }

    #[test]
    fn a_whole_card_is_a_short_burst() {
        let ok = validate(&req("jupyterlab", 49152, 60), &catalog()).unwrap();
        assert!(ok.burst);
        assert!(
            !validate(&req("jupyterlab", 8192, 60), &catalog())
                .unwrap()
                .burst
        );
        let err = validate(&req("jupyterlab", 49152, 61), &catalog()).unwrap_err();
        assert!(err.contains("at most 60 minutes"), "{err}");
    }

    #[test]
    fn refuses_durations_out_of_range() {
        assert!(validate(&req("jupyterlab", 8192, 14), &catalog()).is_err());
        assert!(validate(&req("jupyterlab", 8192, 481), &catalog()).is_err());
        assert!(validate(&req("jupyterlab", 8192, 480), &catalog()).is_ok());
    }

    #[test]
    fn an_image_must_be_approved_for_the_editor_and_the_runtime_must_run_images() {
        let with_image = |id: &str| LaunchRequest {
            image: Some(id.into()),
            ..req("jupyterlab", 8192, 60)
        };
        let err = validate(&with_image("i1"), &catalog()).unwrap_err();
        assert!(err.contains("no image to choose"), "{err}");
        let kube = Catalog {
            editors: vec![
                (EditorKind::JupyterLab, Ok(())),
                (EditorKind::Marimo, Ok(())),
            ],
            images: Some(vec![
                ImageChoice {
                    id: "i1".into(),
                    editor: EditorKind::JupyterLab,
                    reference: "reg.example/jupyter/torch:1".into(),
                    blocked: None,
                },
                ImageChoice {
                    id: "m1".into(),
                    editor: EditorKind::Marimo,
                    reference: "reg.example/marimo:1".into(),
                    blocked: None,
                },
                ImageChoice {
                    id: "old".into(),
                    editor: EditorKind::JupyterLab,
                    reference: "reg.example/jupyter/torch:0".into(),
                    blocked: Some("its newest scan is 40 days old".into()),
                },
            ]),
            ..catalog()
        };
        assert_eq!(
            validate(&with_image("i1"), &kube).unwrap().image.as_deref(),
            Some("reg.example/jupyter/torch:1")
        );
        assert_eq!(
            validate(&req("jupyterlab", 8192, 60), &kube).unwrap().image,
            None
        );
        let err = validate(&with_image("m1"), &kube).unwrap_err();
        assert!(err.contains("runs marimo, not JupyterLab"), "{err}");
        let err = validate(&with_image("gone"), &kube).unwrap_err();
        assert!(err.ends_with("choose one of: i1"), "{err}");
        // Held back by the scan policy: refused with the policy's reason, and not offered.
        let err = validate(&with_image("old"), &kube).unwrap_err();
        assert!(
            err.contains("may not be launched now: its newest scan is 40 days old"),
            "{err}"
        );
    }
}
