//! A pair of network namespaces joined by a veth link, for runs between "hosts".

use std::process::Command;

use super::tracer::wait_for;

/// Two network namespaces joined by a veth pair, `10.231.N.1` and `10.231.N.2`, removed on
/// drop. Names carry this process's PID so that parallel test runs do not collide.
pub(crate) struct NetnsPair {
    /// The namespaces' names.
    pub names: [String; 2],
    /// Their addresses.
    pub addrs: [String; 2],
    /// The veth ends, one in each namespace.
    pub veths: [String; 2],
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("running ip");
    assert!(status.success(), "ip {}", args.join(" "));
}

impl NetnsPair {
    /// Creates the pair; `n` (0-255) tells pairs of one process apart.
    pub(crate) fn new(n: u8) -> Self {
        let pid = std::process::id();
        let names = [format!("lbf{pid}-{n}a"), format!("lbf{pid}-{n}b")];
        let veth = [format!("lv{pid}{n}a"), format!("lv{pid}{n}b")];
        let addrs = [format!("10.231.{n}.1"), format!("10.231.{n}.2")];
        let pair = NetnsPair {
            names: names.clone(),
            addrs: addrs.clone(),
            veths: veth.clone(),
        };
        for name in &names {
            ip(&["netns", "add", name]);
        }
        ip(&[
            "link", "add", &veth[0], "netns", &names[0], "type", "veth", "peer", "name", &veth[1],
            "netns", &names[1],
        ]);
        for i in 0..2 {
            ip(&[
                "-n",
                &names[i],
                "addr",
                "add",
                &format!("{}/24", addrs[i]),
                "dev",
                &veth[i],
            ]);
            ip(&["-n", &names[i], "link", "set", &veth[i], "up"]);
            ip(&["-n", &names[i], "link", "set", "lo", "up"]);
        }
        // The ends report their carrier a moment later, and their IPv6 link-local addresses
        // stay tentative for a second or two (duplicate address detection); until both are
        // done, UCX (under MPICH) finds no usable interface.
        for i in 0..2 {
            wait_for(|| {
                let show = |what: &[&str]| {
                    Command::new("ip")
                        .args(["-n", &names[i], "-o"])
                        .args(what)
                        .args(["dev", &veth[i]])
                        .output()
                        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                        .map_err(|e| e.to_string())
                };
                let (link, addrs) = (show(&["link", "show"])?, show(&["addr", "show"])?);
                if link.contains("state UP") && !addrs.contains("tentative") {
                    Ok(())
                } else {
                    Err(format!("{} is not ready: {link}{addrs}", veth[i]))
                }
            });
        }
        pair
    }

    /// Shapes both directions of the link with a token bucket (`tc qdisc ... tbf`) of `rate`
    /// (tc's units, e.g. `100mbit`) and `burst` bytes, replacing any shaping before.
    pub(crate) fn shape(&self, rate: &str, burst: u32) {
        for i in 0..2 {
            let status = Command::new("tc")
                .args([
                    "-n",
                    &self.names[i],
                    "qdisc",
                    "replace",
                    "dev",
                    &self.veths[i],
                ])
                .args(["root", "tbf", "rate", rate, "burst", &burst.to_string()])
                .args(["latency", "100ms"])
                .status()
                .expect("running tc");
            assert!(
                status.success(),
                "tc qdisc replace ... tbf rate {rate} on {}",
                self.veths[i]
            );
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}
