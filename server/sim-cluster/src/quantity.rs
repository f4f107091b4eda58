//! Kubernetes quantities ("500m", "8Gi", "1e3"), read as the API server reads them, to refuse a bad
//! one with its message and to add them up for quotas and compare them with limits.

/// What the API server says of a string that is not a quantity.
pub const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// A quantity in thousandths of its unit (CPU in millicores, memory in thousandths of a byte):
/// every suffix Kubernetes takes is exact at that scale except `n` and `u`, which round up as the
/// API server's canonical form does.
pub fn milli(text: &str) -> Result<i128, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number.chars().filter(|c| *c == '.').count() > 1 {
        return Err(QUANTITY_FORMAT.into());
    }
    let (negative, digits) = match number.as_bytes()[0] {
        b'-' => (true, &number[1..]),
        b'+' => (false, &number[1..]),
        _ => (false, number),
    };
    if digits.is_empty() || digits.contains(['+', '-']) || digits == "." {
        return Err(QUANTITY_FORMAT.into());
    }
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    // The number as an integer over 10^scale.
    let mut mantissa: i128 = 0;
    for c in whole.chars().chain(fraction.chars()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(c as u8 - b'0')))
            .ok_or("a quantity too large")?;
    }
    let scale = fraction.len() as i32;
    let (base, exponent): (i128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().map_err(|_| QUANTITY_FORMAT.to_string())?;
            (1, e)
        }
        _ => return Err(QUANTITY_FORMAT.into()),
    };
    // value × 1000 = mantissa × base × 10^(exponent + 3 − scale)
    let power = exponent + 3 - scale;
    let mut value = mantissa.checked_mul(base).ok_or("a quantity too large")?;
    if power >= 0 {
        value = value
            .checked_mul(
                10i128
                    .checked_pow(power as u32)
                    .ok_or("a quantity too large")?,
            )
            .ok_or("a quantity too large")?;
    } else {
        let divisor = 10i128
            .checked_pow((-power) as u32)
            .ok_or("a quantity too small")?;
        value = (value + divisor - 1) / divisor;
    }
    Ok(if negative { -value } else { value })
}

/// A sum back as a quantity string, in the unit's plain form ("2", "1500m", "17179869184").
pub fn format_milli(value: i128) -> String {
    if value % 1000 == 0 {
        (value / 1000).to_string()
    } else {
        format!("{value}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_the_api_server_reads_them() {
        assert_eq!(milli("500m"), Ok(500));
        assert_eq!(milli("2"), Ok(2000));
        assert_eq!(milli("1.5"), Ok(1500));
        assert_eq!(milli("8Gi"), Ok(8 * (1 << 30) * 1000));
        assert_eq!(milli("1e3"), Ok(1_000_000));
        assert_eq!(milli("1k"), Ok(1_000_000));
        assert_eq!(milli("100n"), Ok(1), "rounded up");
        assert_eq!(milli("-1"), Ok(-1000));
        for bad in ["", "Gi", "8 GB", "1.2.3", "8gb", "--1", "1e", "."] {
            assert_eq!(milli(bad), Err(QUANTITY_FORMAT.into()), "{bad}");
        }
        assert_eq!(format_milli(1500), "1500m");
        assert_eq!(format_milli(2000), "2");
    }
}
