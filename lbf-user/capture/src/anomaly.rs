//! What a capture could not model: each kind of anomaly, counted in [`crate::Summary`] and
//! reported with the result (`lbf-trace` prints each with its count; a test asks for one by
//! its variant rather than by its text).

use std::collections::BTreeMap;
use std::fmt;

use crate::mpi::inspect::InspectError;
use crate::roster::Labels;
use crate::sockets::resolve::Unidentified;

/// One kind of thing a capture saw and could not turn into events exactly. Its `Display` is
/// the sentence users read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Anomaly {
    // The kernel side (counted by the probes, noted by `lbf-record`).
    /// Records the ring buffer had no room for.
    RingBufferFull,
    /// Return probes that found no entry (the entry's record was lost).
    ExitRecordWithoutEntry,
    /// Calls already running when the probes attached.
    InProgressAtAttach,
    /// The notice of an `MPI_Init` return the kernel could not hand over in time.
    InitNoticeLost,

    // Any capture.
    /// A record whose kind the capture does not know (a probe newer than the capture).
    UnknownRecordKind,
    /// A process that joined after the number the capture expected had: left out.
    LeftOut {
        /// How the capture names its processes.
        labels: Labels,
        /// The process, as the roster names it.
        name: String,
        /// How many were expected.
        expected: usize,
    },
    /// A member still running when the capture ended (closed with an `Exit`).
    StillRunning {
        /// How the capture names its processes.
        labels: Labels,
    },
    /// Fewer processes joined than expected.
    FewerJoined {
        /// How the capture names its processes.
        labels: Labels,
        /// How many were expected.
        expected: usize,
        /// How many joined.
        joined: usize,
    },
    /// A receive whose sender is not in the trace (handled as a `Keepalive`).
    RecvFromLeftOut {
        /// How the capture names its processes.
        labels: Labels,
    },

    // MPI.
    /// A rank that ended without calling `MPI_Finalize`.
    ExitedWithoutFinalize,
    /// A message from another host whose size the receive's status did not show.
    RemoteOfUnknownSize,
    /// After an attach: a receive of a message sent before it.
    RecvOfEarlierSend,
    /// After an attach: a send whose receive was posted before it.
    SendToEarlierRecv,
    /// After an attach: a send no receive took by the end.
    UnreceivedSend,
    /// After an attach: a receive paired by timing alone.
    RecvMatchedByTiming,
    /// After an attach: a wildcard receive with no visible status.
    WildcardWithoutStatus,
    /// After an attach: a message end numbered from the attach.
    RemoteEndNumberedFromAttach,
    /// After an attach: a collective some member entered before it.
    CollectiveEnteredBeforeAttach,
    /// After an attach: a collective aligned by count alone.
    CollectiveAlignedByCount,
    /// After an attach: a request made before it, completed (not modelled).
    RequestBeforeAttach,
    /// A collective after an attach on a node capture.
    CollectiveAfterAttach,
    /// Fewer ranks than this host was to run.
    FewerRanksThanHost,
    /// Fewer ranks than `MPI_COMM_WORLD` has.
    FewerRanksThanWorld,
    /// A rank still running when the capture ended.
    RankStillRunning,
    /// A process whose world rank never became known.
    RankNeverKnown,
    /// A process that could not be inspected (its MPI library not read).
    Uninspectable(InspectError),
    /// Two processes with one world rank: two jobs in one capture.
    RankClaimedTwice {
        /// The rank.
        rank: u32,
        /// The process that had it first.
        owner: u32,
        /// The process that claimed it too (left out).
        tgid: u32,
    },
    /// A communicator whose parent the capture does not know.
    UnknownParentComm,
    /// A call's return without its entry.
    ExitWithoutEntry,
    /// A call's return of another function than the thread's open entry.
    ExitOfOtherFunction,
    /// A request array longer than a record holds.
    RequestArrayTooLong,
    /// A send to a rank outside its communicator.
    SendToInvalidRank,
    /// A send on a communicator in which the sender's rank is unknown.
    SendOnUnknownComm,
    /// A send whose size is unknown (derived datatype).
    SendOfUnknownSize,
    /// A receive posted and never completed.
    RecvNeverCompleted,
    /// A send cancelled (`MPI_Cancel`).
    SendCancelled,
    /// A receive on a communicator in which the receiver's rank is unknown.
    RecvOnUnknownComm,
    /// A collective on a communicator the capture does not know.
    CollectiveOnUnknownComm,
    /// A collective on a communicator of unknown size.
    CollectiveOfUnknownCommSize,
    /// A collective whose payload is not known (derived datatype or count array).
    CollectiveOfUnknownSize,
    /// A collective whose count array is longer than a record holds.
    CollectiveCountsCut,

    // PVM.
    /// A `pvm_barrier` whose group name could not be read.
    BarrierOfUnreadableGroup,
    /// A `pvm_mcast` to more tasks than a record holds.
    McastTooWide,
    /// A PVM send of a packed string longer than a record holds.
    PvmSendOfUnknownSize,
    /// A PVM send by a task with no `pvm_mytid` seen.
    PvmSendByUnknownTask,
    /// A `pvm_joingroup` by an unknown task or of an unreadable group.
    JoinGroupUnknown,
    /// A PVM receive whose message head could not be read.
    PvmRecvHeadUnread,
    /// A PVM receive by a task with no `pvm_mytid` seen.
    PvmRecvByUnknownTask,

    /// No traced process sent or received a PVM message.
    NoPvmMessage,

    // Sockets.
    /// A socket descriptor that could not be identified.
    SocketUnidentified(Unidentified),
    /// A `sendmmsg`/`recvmmsg` continuation without its first record.
    MmsgWithoutStart,
    /// `sendmmsg`/`recvmmsg` messages whose sizes could not be read.
    MmsgSizesUnread,
    /// A datagram sent on an unconnected socket.
    UnconnectedDatagram,
    /// A UDP datagram no receive matched.
    UdpUnmatched,
    /// A socket of a family lbf does not capture.
    OtherFamily {
        /// The family's name.
        family: String,
    },
    /// No traced process used a captured socket.
    NoSocketUsed {
        /// The processes seen, by name.
        seen: Vec<String>,
    },
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Anomaly::*;
        let text = match self {
            RingBufferFull => "records lost: ring buffer full",
            ExitRecordWithoutEntry => "records lost: call exit without its entry",
            InProgressAtAttach => "call in progress at the attach (not modelled)",
            InitNoticeLost => {
                "MPI_Init notice lost: the rank was inspected only when its records were read"
            }
            UnknownRecordKind => "record of unknown kind",
            LeftOut {
                labels,
                name,
                expected,
            } => {
                return write!(
                    f,
                    "{name} {} after the {expected} expected {} had (--procs or the targets' \
                     processes): left out of the trace, its events counted as lost",
                    labels.joins, labels.many
                )
            }
            StillRunning { labels } => {
                return write!(f, "{} still running at the end of the capture", labels.one)
            }
            FewerJoined {
                labels,
                expected,
                joined,
            } => {
                return write!(
                    f,
                    "fewer {} {} than the {expected} expected (--procs or the targets' \
                     processes): {joined} did, and their events were handed out at the end",
                    labels.many, labels.joins
                )
            }
            RecvFromLeftOut { labels } => {
                return write!(
                    f,
                    "receive of a message from a {} left out of the trace (a Keepalive instead)",
                    labels.one
                )
            }
            ExitedWithoutFinalize => "rank exited without MPI_Finalize",
            RemoteOfUnknownSize => "message from another host of unknown size (status not visible)",
            RecvOfEarlierSend => "receive of a message sent before the attach (no dependency)",
            SendToEarlierRecv => {
                "send received by a receive posted before the attach (not modelled)"
            }
            UnreceivedSend => "send not received by the end of the capture",
            RecvMatchedByTiming => {
                "receive matched by timing alone: the capture ended before the job"
            }
            WildcardWithoutStatus => {
                "wildcard receive without a visible status after an attach (unmatched)"
            }
            RemoteEndNumberedFromAttach => {
                "message end to or from another host after an attach: numbered from the attach"
            }
            CollectiveEnteredBeforeAttach => {
                "collective entered by a member before the attach (not modelled)"
            }
            CollectiveAlignedByCount => {
                "collective aligned by count alone: the capture ended before the job"
            }
            RequestBeforeAttach => "request made before the attach completed (not modelled)",
            CollectiveAfterAttach => {
                "collective after an attach on a node capture: numbered from the attach"
            }
            FewerRanksThanHost => "fewer ranks seen than this host was to run",
            FewerRanksThanWorld => "fewer ranks seen than MPI_COMM_WORLD has",
            RankStillRunning => "rank still running at the end of the capture",
            RankNeverKnown => "MPI process whose rank never became known",
            Uninspectable(e) => return e.fmt(f),
            RankClaimedTwice { rank, owner, tgid } => {
                return write!(
                    f,
                    "two processes ({owner}, {tgid}) claim rank {rank}: one MPI job per capture"
                )
            }
            UnknownParentComm => "communicator created from an unknown parent",
            ExitWithoutEntry => "call exit without its entry",
            ExitOfOtherFunction => "call exit of another function than the open entry",
            RequestArrayTooLong => "request array longer than a record holds",
            SendToInvalidRank => "send to an invalid rank",
            SendOnUnknownComm => "send on a communicator whose rank is unknown",
            SendOfUnknownSize => "send of unknown size (derived datatype)",
            RecvNeverCompleted => "receive posted and never completed",
            SendCancelled => "send cancelled (not modelled)",
            RecvOnUnknownComm => "receive on a communicator whose rank is unknown",
            CollectiveOnUnknownComm => "collective on an unknown communicator",
            CollectiveOfUnknownCommSize => "collective on a communicator of unknown size",
            CollectiveOfUnknownSize => {
                "collective of unknown size (derived datatype or count array)"
            }
            CollectiveCountsCut => {
                "collective count array cut short (longer than a record holds): bytes of the \
                 members beyond left out"
            }
            BarrierOfUnreadableGroup => "pvm_barrier of an unreadable group name",
            McastTooWide => "pvm_mcast to more tasks than a record holds (64)",
            PvmSendOfUnknownSize => {
                "PVM send of unknown size (a packed string longer than 255 bytes)"
            }
            PvmSendByUnknownTask => "PVM send by a task whose id is unknown (no pvm_mytid seen)",
            JoinGroupUnknown => "pvm_joingroup by an unknown task or of an unreadable group",
            PvmRecvHeadUnread => {
                "PVM receive whose message head could not be read (matched by its source and \
                 tag among this host's sends)"
            }
            PvmRecvByUnknownTask => "PVM receive by a task whose id is unknown (no pvm_mytid seen)",
            NoPvmMessage => "no traced process sent or received a PVM message",
            SocketUnidentified(why) => return why.fmt(f),
            MmsgWithoutStart => "a sendmmsg/recvmmsg record without the records before it",
            MmsgSizesUnread => "sendmmsg/recvmmsg messages whose sizes could not be read",
            UnconnectedDatagram => "datagram sent on an unconnected socket",
            UdpUnmatched => {
                "UDP datagram not matched (lbf-node matches TCP between hosts, UDP on no host: \
                 a datagram's other end may be on another host): a Keepalive instead"
            }
            OtherFamily { family } => {
                return write!(
                    f,
                    "socket of a family lbf does not capture ({family}; it captures TCP, UDP \
                     and UNIX sockets)"
                )
            }
            NoSocketUsed { seen } => {
                return write!(
                    f,
                    "no traced process used a TCP, UDP or UNIX socket (processes seen: {})",
                    if seen.is_empty() {
                        "none".to_string()
                    } else {
                        seen.join(", ")
                    }
                )
            }
        };
        f.write_str(text)
    }
}

/// Anomalies with how often each happened.
pub type Anomalies = BTreeMap<Anomaly, u64>;

/// Counts one occurrence of `what`.
pub(crate) fn note(anomalies: &mut Anomalies, what: Anomaly) {
    count(anomalies, what, 1);
}

/// Counts `n` occurrences of `what` (none: nothing noted).
pub fn count(anomalies: &mut Anomalies, what: Anomaly, n: u64) {
    if n > 0 {
        *anomalies.entry(what).or_default() += n;
    }
}
