//! Which MPI sends go by rendezvous: a library sends a message eagerly up to a limit that
//! depends on the transport, and above it only once the receiver has matched it (the sender
//! waits for the receive; see `engine::sim::rendezvous`). Synchronous sends (`MPI_Ssend`)
//! wait for the receive at any size; buffered sends (`MPI_Bsend`) never wait.
//!
//! The limits are those of the libraries this project runs (Debian 12), measured with a
//! receiver that posts its receive 50 ms late and an `MPI_Iprobe` in between (a send that
//! returns at once or at the probe went eagerly; one that returns at the receive waited for
//! it), and what their configuration changes, as read from the process's environment
//! (`mpirun --mca X Y` reaches the ranks as `OMPI_MCA_X=Y`):
//!
//! | library | to itself | same host | another host |
//! | --- | --- | --- | --- |
//! | Open MPI 4.1, ob1 | `btl_self_eager_limit - 56` (968) | vader: `btl_vader_eager_limit - 56` (4040) | tcp: `btl_tcp_eager_limit - 56` (65480) |
//! | MPICH 4.0 ch4:ucx | every send waits | UCX shared memory: 8255 | UCX tcp: 8191 |
//!
//! - Open MPI's ob1 sends eagerly what fits in one fragment of the transport (a BTL) with its
//!   56-byte header: `OMPI_MCA_btl_<btl>_eager_limit` sets the limit (checked: vader at 8192
//!   and 2048). Between ranks of one host it uses `vader` unless `OMPI_MCA_btl` leaves it out
//!   (`tcp,self`, `^vader`), then `tcp`. Another PML (`OMPI_MCA_pml=ucx`, `cm`) has other
//!   rules, not known here: its sends are taken as eager.
//! - MPICH 4.0 as Debian builds it (`ch4:ucx`) leaves every message to UCX, on one host
//!   through UCX's shared memory (`MPIR_CVAR_NOLOCAL=1` does not change that), unless
//!   `UCX_TLS` leaves shared memory out. `UCX_RNDV_THRESH=N` makes every message of `N`
//!   bytes or more go by rendezvous (checked at 2000; over TCP at 20000 by hand only, as
//!   MPICH over UCX's TCP sometimes hangs in `MPI_Finalize` here). Without it, UCX picks the
//!   TCP threshold from the interface's speed: 8192 on this project's VM's virtio NIC (the
//!   8191 above), between 16385 and 32768 on a veth (10 Gb/s). The capture cannot see UCX's
//!   choice and takes 8191: set `UCX_RNDV_THRESH` where it matters. A send to the process
//!   itself is matched only by its receive, whatever its size. An MPICH without UCX (`ch3`) is
//!   not known here: its sends are taken as eager.
//! - Open MPI's vader also holds a blocking send of 257 to 4040 bytes until the receiver's
//!   library runs (its next MPI call, not its receive): that is not rendezvous and is not
//!   modelled (the sender's wait counts as its work, as before).

use lbf_common::maps::{abi, SendRules};

use super::library::{Abi, Library};

/// The largest message sent eagerly per route; `None`: every message waits for its receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerLimits {
    /// A send to the sending process itself.
    pub itself: Option<u64>,
    /// A send to another process of the same host.
    pub same_host: Option<u64>,
    /// A send to a process of another host.
    pub other_host: Option<u64>,
}

/// Where a message goes, which selects the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// To the sending process itself.
    Itself,
    /// To another process of the same host.
    SameHost,
    /// To a process of another host.
    OtherHost,
    /// To a process whose host is not known: the larger limit applies, so that a send is
    /// taken as rendezvous only if it is one whatever the host.
    Unknown,
}

/// How a send call waits, by its MPI mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// `MPI_Send`, `MPI_Rsend` and their nonblocking forms: by size.
    Standard,
    /// `MPI_Ssend`, `MPI_Issend`: waits for the receive at any size.
    Synchronous,
    /// `MPI_Bsend`, `MPI_Ibsend`: copied into the attached buffer, never waits.
    Buffered,
}

/// ob1's header in every fragment (Open MPI 4.1): the eager payload is the BTL's limit less
/// this (measured: 4096 -> 4040, 65536 -> 65480, 1024 -> 968, 8192 -> 8136, 2048 -> 1992).
const OB1_HEADER: u64 = 56;

/// Every message is taken as eager: a library whose rules are not known here.
const ALL_EAGER: EagerLimits = EagerLimits {
    itself: Some(u64::MAX),
    same_host: Some(u64::MAX),
    other_host: Some(u64::MAX),
};

impl EagerLimits {
    /// The limits of a process using `library` whose environment is `environ` (the
    /// NUL-separated `name=value` block of `/proc/PID/environ`), which maps the UCX library
    /// if `ucx` (MPICH's `ch4:ucx` device).
    pub fn of(library: Library, environ: &[u8], ucx: bool) -> Self {
        let var = |name: &str| -> Option<&str> {
            environ
                .split(|&b| b == 0)
                .filter_map(|kv| std::str::from_utf8(kv).ok())
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        };
        let number = |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok());
        match library {
            Library::OpenMpi => {
                if var("OMPI_MCA_pml").is_some_and(|pml| pml.trim() != "ob1") {
                    return ALL_EAGER;
                }
                let btl = |name: &str, default: u64| {
                    let limit = number(&format!("OMPI_MCA_btl_{name}_eager_limit"));
                    Some(limit.unwrap_or(default).saturating_sub(OB1_HEADER))
                };
                let tcp = btl("tcp", 65536);
                let vader_allowed = var("OMPI_MCA_btl").is_none_or(|list| {
                    let list = list.trim();
                    match list.strip_prefix('^') {
                        Some(excluded) => !excluded.split(',').any(|b| matches!(b, "vader" | "sm")),
                        None => list.split(',').any(|b| matches!(b, "vader" | "sm")),
                    }
                });
                EagerLimits {
                    itself: btl("self", 1024),
                    same_host: if vader_allowed {
                        btl("vader", 4096)
                    } else {
                        tcp
                    },
                    other_host: tcp,
                }
            }
            Library::Mpich if !ucx => ALL_EAGER,
            Library::Mpich => {
                if let Some(threshold) = number("UCX_RNDV_THRESH") {
                    let limit = Some(threshold.saturating_sub(1));
                    return EagerLimits {
                        itself: None,
                        same_host: limit,
                        other_host: limit,
                    };
                }
                let shared_memory = var("UCX_TLS").is_none_or(|list| {
                    list.split(',').any(|t| {
                        matches!(
                            t.trim().trim_start_matches('^'),
                            "all" | "shm" | "sm" | "posix" | "sysv" | "cma" | "xpmem" | "knem"
                        )
                    }) != list.trim().starts_with('^')
                });
                EagerLimits {
                    itself: None,
                    same_host: Some(if shared_memory { 8255 } else { 8191 }),
                    other_host: Some(8191),
                }
            }
        }
    }

    /// The limits of `library` in its default configuration (as Debian installs it).
    pub fn default_of(library: Library) -> Self {
        Self::of(library, &[], true)
    }

    /// What the kernel side needs to tell, at a blocking send's entry, that the send goes
    /// eagerly by these limits, for a process of `abi` whose `MPI_COMM_WORLD` rank is `rank`
    /// (see [`SendRules`]): the smaller limit of the two routes to another process (which one
    /// a message takes is not known there), and the limit to the process itself.
    pub fn send_rules(&self, abi: &Abi, rank: Option<u32>) -> SendRules {
        let below = |limit: Option<u64>| limit.map_or(0, |l| l.saturating_add(1));
        let others = self.same_host.zip(self.other_host).map(|(a, b)| a.min(b));
        SendRules {
            eager_below: below(others),
            self_eager_below: below(self.itself.zip(others).map(|(a, b)| a.min(b))),
            world_comm: rank.map_or(SendRules::NO_COMM, |_| abi.world()),
            world_rank: rank.map_or(u64::MAX, u64::from),
            abi: match abi {
                Abi::OpenMpi(_) => abi::OPEN_MPI,
                Abi::Mpich(_) => abi::MPICH,
            },
        }
    }

    /// Whether a send of `bytes` along `route` in `mode` waits for its receive.
    pub fn rendezvous(&self, route: Route, mode: SendMode, bytes: u64) -> bool {
        let limit = match route {
            Route::Itself => self.itself,
            Route::SameHost => self.same_host,
            Route::OtherHost => self.other_host,
            Route::Unknown => match (self.same_host, self.other_host) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        };
        match mode {
            SendMode::Synchronous => true,
            SendMode::Buffered => false,
            SendMode::Standard => limit.is_none_or(|limit| bytes > limit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[&str]) -> Vec<u8> {
        vars.iter()
            .flat_map(|v| [v.as_bytes(), b"\0"].concat())
            .collect()
    }

    #[test]
    fn defaults_are_the_measured_switches() {
        let ompi = EagerLimits::default_of(Library::OpenMpi);
        let mpich = EagerLimits::default_of(Library::Mpich);
        let standard =
            |l: &EagerLimits, route, bytes| l.rendezvous(route, SendMode::Standard, bytes);
        for (limits, route, last_eager) in [
            (&ompi, Route::SameHost, 4040),
            (&ompi, Route::OtherHost, 65480),
            (&ompi, Route::Itself, 968),
            (&mpich, Route::SameHost, 8255),
            (&mpich, Route::OtherHost, 8191),
        ] {
            assert!(
                !standard(limits, route, last_eager),
                "{route:?} {last_eager}"
            );
            assert!(
                standard(limits, route, last_eager + 1),
                "{route:?} {last_eager}"
            );
        }
        assert!(standard(&mpich, Route::Itself, 1));
        assert!(!standard(&mpich, Route::Unknown, 8255));
        assert!(mpich.rendezvous(Route::SameHost, SendMode::Synchronous, 0));
        assert!(!mpich.rendezvous(Route::SameHost, SendMode::Buffered, 1 << 20));
    }

    /// The kernel's rules find a send eager only where [`EagerLimits::rendezvous`] does on
    /// every route the send could take.
    #[test]
    fn the_kernels_send_rules_are_never_bolder_than_the_capture() {
        use super::super::{mpich::Mpich, openmpi::OpenMpi};
        let world = 0x7f00_0000_1000;
        let abis = [
            Abi::OpenMpi(OpenMpi {
                comm_world: world,
                comm_self: world + 0x200,
                request_null: world + 0x400,
            }),
            Abi::Mpich(Mpich),
        ];
        let envs: [&[&str]; 4] = [
            &[],
            &["OMPI_MCA_btl=tcp,self", "UCX_TLS=tcp,self"],
            &["OMPI_MCA_btl_self_eager_limit=65536", "UCX_RNDV_THRESH=100"],
            &["OMPI_MCA_pml=ucx"],
        ];
        for abi in &abis {
            for vars in envs {
                let limits = EagerLimits::of(abi.library(), &env(vars), true);
                for rank in [None, Some(1)] {
                    let rules = limits.send_rules(abi, rank);
                    for bytes in [0, 1, 100, 968, 969, 4040, 4041, 8191, 8192, 65480, 65481] {
                        for (dest, comm) in [(0, abi.world()), (1, abi.world()), (0, 5)] {
                            if !rules.surely_eager(bytes as i32, Some(1), dest, comm) {
                                continue;
                            }
                            let itself = rank == Some(dest as u32) || comm != abi.world();
                            let routes: &[Route] = if itself {
                                &[
                                    Route::Itself,
                                    Route::SameHost,
                                    Route::OtherHost,
                                    Route::Unknown,
                                ]
                            } else {
                                &[Route::SameHost, Route::OtherHost, Route::Unknown]
                            };
                            for &route in routes {
                                assert!(
                                    !limits.rendezvous(route, SendMode::Standard, bytes),
                                    "{abi:?} {vars:?} rank {rank:?}: {bytes} bytes to {dest} \
                                     on {comm:#x} by {route:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
        let ompi = EagerLimits::default_of(Library::OpenMpi).send_rules(&abis[0], Some(0));
        assert_eq!((ompi.eager_below, ompi.self_eager_below), (4041, 969));
        let mpich = EagerLimits::default_of(Library::Mpich).send_rules(&abis[1], Some(0));
        assert_eq!((mpich.eager_below, mpich.self_eager_below), (8192, 0));
    }

    #[test]
    fn the_environment_changes_them() {
        let ompi = |vars: &[&str]| EagerLimits::of(Library::OpenMpi, &env(vars), false);
        assert_eq!(
            ompi(&["OMPI_MCA_btl_vader_eager_limit=8192"]).same_host,
            Some(8136)
        );
        let tcp_only = ompi(&["HOME=/root", "OMPI_MCA_btl=tcp,self"]);
        assert_eq!(tcp_only.same_host, Some(65480));
        assert_eq!(ompi(&["OMPI_MCA_btl=^vader"]).same_host, Some(65480));
        assert_eq!(ompi(&["OMPI_MCA_btl=^openib"]).same_host, Some(4040));
        assert_eq!(
            ompi(&[
                "OMPI_MCA_btl=vader,self,tcp",
                "OMPI_MCA_btl_tcp_eager_limit=1000"
            ]),
            EagerLimits {
                itself: Some(968),
                same_host: Some(4040),
                other_host: Some(944)
            }
        );
        assert_eq!(ompi(&["OMPI_MCA_pml=ucx"]), ALL_EAGER);
        assert_eq!(ompi(&["OMPI_MCA_pml=ob1"]).same_host, Some(4040));
        let mpich = |vars: &[&str]| EagerLimits::of(Library::Mpich, &env(vars), true);
        assert_eq!(mpich(&["UCX_TLS=tcp,self"]).same_host, Some(8191));
        assert_eq!(mpich(&["UCX_TLS=^tcp"]).same_host, Some(8255));
        assert_eq!(mpich(&["UCX_TLS=^shm"]).same_host, Some(8191));
        assert_eq!(mpich(&["UCX_RNDV_THRESH=2000"]).same_host, Some(1999));
        assert_eq!(
            EagerLimits::of(Library::Mpich, &env(&[]), false),
            ALL_EAGER,
            "MPICH without UCX"
        );
    }
}
