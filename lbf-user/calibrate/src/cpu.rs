//! A host's CPU characterisation: how many cores its processes get and how fast one of them
//! runs, from four micro-benchmarks (ChronosMix's machine characterisation, reduced to what
//! the engine's `cores` and `speed` can use).
//!
//! - `integer`: a chain of 64-bit multiplies, adds, shifts and xors (one dependent chain);
//! - `float`: four independent chains of double-precision multiply-adds;
//! - `cache`: summing a 32 KiB array (it stays in the first-level cache);
//! - `dram`: summing a 64 MiB array (larger than any cache here).
//!
//! Each is timed by the wall clock, in short chunks taken in turn over the whole measurement,
//! so that what takes the CPU away from the host's processes (a cgroup's quota, `cpu.max` or
//! v1's `cpu.cfs_quota_us`, which throttles in periods of 100 ms by default, or other work) weighs on every benchmark alike
//! and a measurement of many periods averages it out. A benchmark's rate is its work over its
//! wall time; the host's `speed` is the reference-seconds of work done (each benchmark's work
//! over the reference's rate) per second of all the benchmarks' time: with equal time for
//! each, the mean of the four rates over the reference's.
//! The reference is [`REFERENCE`] (the project's development machine) or another host's
//! measurement (`--reference`).

use crate::progress::Progress;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The benchmarks' names, in the order of every rate array here.
pub const BENCHMARKS: [&str; 4] = ["integer", "float", "cache", "dram"];

/// Rates of the reference host, in operations per second for [`BENCHMARKS`]: measured on the
/// project's development machine (2 vCPUs of a KVM guest, Debian 12) with
/// `taskset -c 0 lbf-node calibrate --cpu` on an otherwise idle machine (two runs: 5.96e8 and
/// 6.07e8, 2.43e9 and 2.44e9, 1.11e11 and 1.12e11, 2.40e10 and 2.44e10). Speed 1.0 is that
/// machine; a host file of another machine (`--reference`) makes it the reference instead.
pub const REFERENCE: [f64; 4] = [6.0e8, 2.4e9, 1.1e11, 2.4e10];

/// 64-bit words of the cache-sized array: 32 KiB.
const CACHE_WORDS: usize = 4096;
/// 64-bit words of the memory-sized array: 64 MiB.
const DRAM_WORDS: usize = 8 << 20;
/// 64-bit words of the memory-sized array summed at a time: 1 MiB.
const DRAM_SLICE: usize = 128 << 10;
/// How long each benchmark runs before the next takes over.
const CHUNK: Duration = Duration::from_millis(2);

/// What the measurement found.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuReport {
    /// The CPUs this process may run on (its affinity).
    pub cpus: u32,
    /// The CPU its cgroups allow, in CPUs (`cpu.max` quota over period, the tightest of its
    /// cgroup and their parents), if any limits it.
    pub quota: Option<f64>,
    /// The cores a node of this host has: the CPUs, fewer where the quota allows fewer
    /// (rounded up).
    pub cores: u32,
    /// Operations per wall-clock second of each benchmark, one process running.
    pub rates: [f64; 4],
    /// The rates over the reference's: reference-seconds of work per second.
    pub speed: f64,
    /// Wall time spent measuring.
    pub seconds: f64,
}

/// Runs the benchmarks for about `duration` and rates them against `reference`.
pub fn measure(duration: Duration, reference: &[f64; 4], progress: &mut Progress) -> CpuReport {
    let mut dram = vec![1u64; DRAM_WORDS];
    let mut cache = vec![1u64; CACHE_WORDS];
    let mut work = [0f64; 4];
    let mut wall = [0f64; 4];
    // Filling the arrays took CPU: under a quota, wait for it to be paid back (the quota of
    // a 100 ms period is spent by then) so that the measurement starts on a fresh period.
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let mut seed = 1u64;
    let mut slice = 0;
    let mut round = 0u64;
    // Chunks of CHUNK each in turn, so that each benchmark takes the same share of the time
    // and of any throttling. Each round starts at a benchmark of its own (a pseudo-random
    // one): in a fixed order a quota's period locks onto the rounds, and the time its
    // throttling takes would fall on the same benchmarks every period (with 1 ms of every
    // 8.3 ms, `integer` read 0.07 of this machine's rate and `float` 0.30).
    while start.elapsed() < duration {
        let tenths = start.elapsed().as_secs_f64() * 10.0 / duration.as_secs_f64();
        progress.show(tenths as usize * 10, 100, "%");
        round = round
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let first = (round >> 62) as usize;
        for b in (0..BENCHMARKS.len()).map(|i| (first + i) % BENCHMARKS.len()) {
            let w = &mut work[b];
            let t = Instant::now();
            while t.elapsed() < CHUNK {
                *w += match b {
                    0 => integer(&mut seed),
                    1 => float(seed),
                    2 => sum(&mut cache, 16),
                    _ => {
                        // The next MiB of the large array, so that it streams from memory.
                        slice = (slice + DRAM_SLICE) % DRAM_WORDS;
                        sum(&mut dram[slice..slice + DRAM_SLICE], 1)
                    }
                };
            }
            wall[b] += t.elapsed().as_secs_f64();
        }
    }
    progress.done();
    let rates: [f64; 4] = std::array::from_fn(|b| work[b] / wall[b]);
    // Reference-seconds of work per second, over all the benchmarks' time.
    let reference_seconds: f64 = work.iter().zip(reference).map(|(w, r)| w / r).sum();
    let speed = reference_seconds / wall.iter().sum::<f64>();
    let cpus = affinity_cpus();
    let quota = lbf_host::cpu_quota(None).map(|q| q.cpus);
    let cores = match quota {
        Some(q) => (q.ceil() as u32).clamp(1, cpus),
        None => cpus,
    };
    CpuReport {
        cpus,
        quota,
        cores,
        rates,
        speed,
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// One unit of the integer chain: returns the operations done.
fn integer(seed: &mut u64) -> f64 {
    const N: u32 = 1 << 14;
    let mut x = black_box(*seed);
    for _ in 0..N {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x ^= x >> 29;
    }
    *seed = black_box(x);
    f64::from(N)
}

/// One unit of the floating-point chains: returns the multiply-adds done.
fn float(seed: u64) -> f64 {
    const N: u32 = 1 << 14;
    let k = black_box(0.999_999_9);
    let c = black_box(1e-7);
    let mut a = [seed as f64 * 1e-20, 1.0, 2.0, 3.0];
    for _ in 0..N {
        for v in &mut a {
            *v = *v * k + c;
        }
    }
    black_box(a);
    f64::from(N) * 4.0
}

/// Sums `data` `passes` times (touching each word): returns the bytes read.
fn sum(data: &mut [u64], passes: u32) -> f64 {
    let mut total = 0u64;
    for _ in 0..passes {
        for &w in black_box(&*data) {
            total = total.wrapping_add(w);
        }
    }
    data[0] = black_box(total) & 1;
    data.len() as f64 * 8.0 * f64::from(passes)
}

/// The CPUs this process may run on.
fn affinity_cpus() -> u32 {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            return libc::CPU_COUNT(&set).max(1) as u32;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_measurement_rates_every_benchmark() {
        let r = measure(
            Duration::from_millis(200),
            &REFERENCE,
            &mut Progress::hidden(),
        );
        assert!(r.rates.iter().all(|&x| x > 0.0), "{r:?}");
        assert!(r.speed > 0.0 && r.cores >= 1 && r.cores <= r.cpus, "{r:?}");
    }
}
