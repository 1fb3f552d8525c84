//! Program struct and type bindings.

pub mod cgroup_skb;
pub mod cgroup_sock;
pub mod cgroup_sock_addr;
pub mod cgroup_sockopt;
pub mod sk_reuseport;
pub mod sk_skb;
mod types;
pub mod xdp;

pub use cgroup_skb::CgroupSkbAttachType;
pub use cgroup_sock::CgroupSockAttachType;
pub use cgroup_sock_addr::CgroupSockAddrAttachType;
pub use cgroup_sockopt::CgroupSockoptAttachType;
pub use sk_reuseport::SkReuseportAttachType;
pub use sk_skb::SkSkbKind;
pub use xdp::XdpAttachType;
