//! The ping-pong's settings as command-line options, shared by every command that runs one
//! (`lbf-node calibrate`, `lbf-gag calibrate`), and the size syntax (`16M`) they take.

use crate::pingpong::{Plan, MAX_MESSAGE};
use std::time::Duration;

/// How much of each size a ping-pong measures: `#[command(flatten)]` into a command.
#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Network")]
pub struct PingPongArgs {
    /// The largest message, in bytes (K, M, G suffixes), rounded down to a power of two.
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    pub max_bytes: u64,

    /// Round trips per size at least.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub min_reps: u32,

    /// Round trips per size at most.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_reps: u32,

    /// Seconds per size after which no more round trips start (beyond --min-reps).
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5)]
    pub seconds_per_size: f64,
}

impl PingPongArgs {
    /// The plan these options give, or what is wrong with them.
    pub fn plan(&self) -> Result<Plan, String> {
        Plan::new(
            self.max_bytes,
            self.min_reps,
            self.max_reps,
            self.seconds_per_size,
        )
        .map_err(|e| format!("--{e}"))
    }
}

impl Plan {
    /// A plan, checked: at most [`MAX_MESSAGE`] bytes, `min_reps` at least 1 and at most
    /// `max_reps`, a finite budget of `seconds_per_size` that is not negative. The error
    /// names the setting (`max-bytes ...`).
    pub fn new(
        max_bytes: u64,
        min_reps: u32,
        max_reps: u32,
        seconds_per_size: f64,
    ) -> Result<Plan, String> {
        if max_bytes > MAX_MESSAGE {
            return Err(format!(
                "max-bytes {max_bytes} is more than {MAX_MESSAGE} (1 GiB)"
            ));
        }
        if min_reps == 0 {
            return Err("min-reps 0: at least one round trip per size is timed".into());
        }
        if max_reps < min_reps {
            return Err(format!("max-reps {max_reps} is below min-reps {min_reps}"));
        }
        if !(seconds_per_size.is_finite() && (0.0..=3600.0).contains(&seconds_per_size)) {
            return Err(format!(
                "seconds-per-size {seconds_per_size} is not a number of seconds from 0 to 3600"
            ));
        }
        Ok(Plan {
            max_bytes,
            min_reps,
            max_reps,
            budget: Duration::from_secs_f64(seconds_per_size),
        })
    }
}

/// A size in bytes as options take it: digits, then optionally K, M or G (powers of 1024;
/// `KB`, `KiB` and so on too).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("unknown size unit `{unit}`; use K, M or G")),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a size (write e.g. 512M)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("3X").unwrap_err().contains("unit"));
        assert!(parse_size("M").unwrap_err().contains("not a size"));
        assert!(parse_size("99999999999G")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn bad_plans_name_the_setting() {
        assert!(Plan::new(1 << 20, 5, 10, 0.5).is_ok());
        assert!(Plan::new(2 << 30, 5, 10, 0.5)
            .unwrap_err()
            .starts_with("max-bytes"));
        assert!(Plan::new(1, 0, 10, 0.5)
            .unwrap_err()
            .starts_with("min-reps"));
        assert!(Plan::new(1, 5, 4, 0.5).unwrap_err().starts_with("max-reps"));
        assert!(Plan::new(1, 5, 10, f64::NAN)
            .unwrap_err()
            .starts_with("seconds-per-size"));
    }
}
