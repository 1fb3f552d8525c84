//! A pair of network namespaces joined by a veth link, for runs between "hosts".

use std::process::Command;

/// Two network namespaces joined by a veth pair, `10.231.N.1` and `10.231.N.2`, removed on
/// drop. Names carry this process's PID so that parallel test runs do not collide.
pub(crate) struct NetnsPair {
    /// The namespaces' names.
    pub names: [String; 2],
    /// Their addresses.
    pub addrs: [String; 2],
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
        pair
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}
