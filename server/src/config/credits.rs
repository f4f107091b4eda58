//! `[credits]`, and how every amount of credits in the configuration is read and checked.

use super::InvalidKey;
use app::domain::credits;
use serde::{Deserialize, Serialize};

/// The largest amount of credits a setting may name (a million credits), in milli-credits.
const MAX_AMOUNT_MILLI: i64 = 1_000_000_000;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreditsConfig {
    /// Credits every new account starts with, e.g. "100" or "12.5".
    #[serde(deserialize_with = "amount")]
    pub initial_grant: String,
}

impl CreditsConfig {
    /// Checks what serde cannot; the error names the key.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        check_amount("credits.initial_grant", &self.initial_grant)
    }
}

/// An amount at `key`: none below zero (a negative price would pay users to launch), none so
/// large that price times minutes could overflow.
pub(super) fn check_amount(key: &str, amount: &str) -> Result<(), InvalidKey> {
    match credits::parse(amount) {
        Err(e) => Err(InvalidKey::new(key, e)),
        Ok(milli) if !(0..=MAX_AMOUNT_MILLI).contains(&milli) => Err(InvalidKey::new(
            key,
            format!("must be between 0 and {}", MAX_AMOUNT_MILLI / 1000),
        )),
        Ok(_) => Ok(()),
    }
}

/// Amounts of credits are decimal text ("12.5"), parsed exactly later; but a number written
/// bare (`initial_grant = 50` in the file, `SANDBOX_CREDITS__INITIAL_GRANT=50` in the
/// environment) arrives as a number, and means the same.
pub(super) fn amount<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    struct Amount;
    impl serde::de::Visitor<'_> for Amount {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an amount of credits such as \"12.5\"")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    deserializer.deserialize_any(Amount)
}
