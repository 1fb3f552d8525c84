//! Named network presets: typical one-way costs of common interconnects, for `preset = "gige"`
//! in a target file and `--network gige` on the command line.
//!
//! Each link is modelled as latency plus size over bandwidth. The numbers are typical published
//! figures (line rates from the standards, latencies of MPI ping-pong half round trips), not
//! measurements of any machine: for real predictions, measure your cluster and write tables.

use super::ConfigError;
use crate::target::{CommTable, Network};

/// A link modelled as `latency + bytes / bandwidth`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// One-way time of an empty message, in seconds.
    pub latency_s: f64,
    /// Sustained payload rate, in bytes per second.
    pub bytes_per_s: f64,
}

impl Link {
    /// The link as a table: two points suffice, since lookups extrapolate linearly.
    fn table(self) -> CommTable {
        let mib = 1_048_576.0;
        CommTable::new(vec![
            (0.0, self.latency_s),
            (mib, self.latency_s + mib / self.bytes_per_s),
        ])
        .expect("preset links are finite and positive")
    }
}

/// A named network: the link within a node and the link between nodes (none costs nothing).
#[derive(Debug, PartialEq)]
pub struct NetworkPreset {
    /// The name used in files and on the command line.
    pub name: &'static str,
    /// One line for `--help` and the docs.
    pub about: &'static str,
    /// Messages between processes on one node.
    pub local: Option<Link>,
    /// Messages between nodes.
    pub remote: Option<Link>,
}

impl NetworkPreset {
    /// The preset's communication tables.
    pub fn network(&self) -> Network {
        Network {
            local: self.local.map(Link::table).unwrap_or_default(),
            remote: self.remote.map(Link::table).unwrap_or_default(),
        }
    }
}

/// Shared memory within a node: sub-microsecond MPI latency, memory-copy bandwidth.
const SHM: Link = Link {
    latency_s: 0.5e-6,
    bytes_per_s: 5e9,
};

/// Every preset, in the order `--help` lists them.
pub const PRESETS: &[NetworkPreset] = &[
    NetworkPreset {
        name: "zero",
        about: "every message is free (pure load balance, LBF only)",
        local: None,
        remote: None,
    },
    NetworkPreset {
        name: "shm",
        about: "shared memory only: 0.5 us + bytes / 5 GB/s on a node; remote messages free",
        local: Some(SHM),
        remote: None,
    },
    NetworkPreset {
        name: "gige",
        about: "1 Gb/s Ethernet, TCP: 50 us + bytes / 125 MB/s between nodes; shm on a node",
        local: Some(SHM),
        remote: Some(Link {
            latency_s: 50e-6,
            bytes_per_s: 125e6,
        }),
    },
    NetworkPreset {
        name: "10gige",
        about: "10 Gb/s Ethernet, TCP: 10 us + bytes / 1.25 GB/s between nodes; shm on a node",
        local: Some(SHM),
        remote: Some(Link {
            latency_s: 10e-6,
            bytes_per_s: 1.25e9,
        }),
    },
    NetworkPreset {
        name: "ib-edr",
        about: "InfiniBand EDR 4x (100 Gb/s): 1 us + bytes / 12.5 GB/s; shm on a node",
        local: Some(SHM),
        remote: Some(Link {
            latency_s: 1e-6,
            bytes_per_s: 12.5e9,
        }),
    },
    NetworkPreset {
        name: "ib-hdr",
        about: "InfiniBand HDR 4x (200 Gb/s): 1 us + bytes / 25 GB/s; shm on a node",
        local: Some(SHM),
        remote: Some(Link {
            latency_s: 1e-6,
            bytes_per_s: 25e9,
        }),
    },
];

/// The preset called `name`; the error lists the known names.
pub fn preset(name: &str) -> Result<&'static NetworkPreset, ConfigError> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let known: Vec<_> = PRESETS.iter().map(|p| p.name).collect();
        ConfigError::new(
            format!("network preset \"{name}\""),
            format!("no such preset; choose one of {}", known.join(", ")),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gige_is_latency_plus_size_over_bandwidth() {
        let net = preset("gige").unwrap().network();
        assert!((net.remote.seconds(0) - 50e-6).abs() < 1e-12);
        // 125 MB at 125 MB/s is one second, far past the table's last point
        assert!((net.remote.seconds(125_000_000) - (1.0 + 50e-6)).abs() < 1e-9);
        assert!((net.local.seconds(5_000_000) - (1e-3 + 0.5e-6)).abs() < 1e-12);
    }

    #[test]
    fn zero_and_shm_leave_remote_free() {
        assert_eq!(preset("zero").unwrap().network(), Network::default());
        let shm = preset("shm").unwrap().network();
        assert_eq!(shm.remote.seconds(1 << 20), 0.0);
        assert!(shm.local.seconds(0) > 0.0);
    }

    #[test]
    fn unknown_preset_lists_the_known_ones() {
        let err = preset("token-ring").unwrap_err();
        assert!(err.to_string().contains("token-ring"), "{err}");
        assert!(
            err.message.contains("gige, 10gige, ib-edr, ib-hdr"),
            "{err}"
        );
    }

    #[test]
    fn names_are_distinct() {
        for (i, p) in PRESETS.iter().enumerate() {
            assert!(
                PRESETS[..i].iter().all(|q| q.name != p.name),
                "{} twice",
                p.name
            );
        }
    }
}
