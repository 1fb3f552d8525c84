//! What the tests share about a shaped link and the files calibration writes: shaping a
//! namespace's device with a `tc ... tbf` token bucket, what such a bucket implies for a TCP
//! message, and the measured points a table file keeps as comments.

use std::process::Command;

/// What a token bucket of `rate` bits/s and `burst` bytes implies for a TCP message of
/// `bytes` one way: `base` (the empty message's time), plus the bytes on the wire beyond the
/// bucket's fill at the rate. On the wire, each segment of 1448 payload bytes (1500 MTU, TCP
/// timestamps) carries 66 bytes of TCP, IP and Ethernet headers; in a ping-pong the bucket is
/// full when a message starts (it refills while the answer travels).
pub(crate) fn shaping_implies(bytes: f64, rate: f64, burst: f64, base: f64) -> f64 {
    let wire = bytes + (bytes / 1448.0).ceil() * 66.0;
    base + (wire - burst).max(0.0) * 8.0 / rate
}

/// The `#   [bytes, seconds, reps]` comments of `text` (a table file calibration wrote, or
/// a section of a cluster file): each measured size's bytes and one-way seconds.
pub(crate) fn comment_points(text: &str) -> Vec<(f64, f64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("#   ["))
        .map(|l| {
            let v: Vec<f64> = l
                .trim_end_matches(']')
                .split(',')
                .map(|x| x.trim().parse().expect("a number"))
                .collect();
            (v[0], v[1])
        })
        .collect()
}

/// Shapes what device `dev` of namespace `ns` sends with a token bucket (`tc qdisc ...
/// tbf`) of `rate` (tc's units, e.g. `100mbit`) and `burst` bytes, replacing any shaping
/// before.
pub(crate) fn shape(ns: &str, dev: &str, rate: &str, burst: u32) {
    let status = Command::new("tc")
        .args(["-n", ns, "qdisc", "replace", "dev", dev])
        .args(["root", "tbf", "rate", rate, "burst", &burst.to_string()])
        .args(["latency", "100ms"])
        .status()
        .expect("running tc");
    assert!(
        status.success(),
        "tc qdisc replace ... tbf rate {rate} on {dev} in {ns}"
    );
}
