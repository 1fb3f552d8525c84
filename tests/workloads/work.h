/* Clocks and exact CPU work, shared by every workload (MPI, sockets, PVM).
 *
 * work_burn burns CPU time of the calling thread, not wall time, so the work a workload does
 * is exact whatever else runs on the machine, and the tests can compare it with a capture. */
#ifndef LBF_WORK_H
#define LBF_WORK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on `clock`. */
static inline int64_t work_clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Burns `ms` milliseconds of this thread's CPU time; returns the nanoseconds burned. */
static inline int64_t work_burn(double ms) {
    int64_t start = work_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    int64_t goal = start + (int64_t)(ms * 1e6);
    volatile uint64_t x = 1;
    while (work_clock_ns(CLOCK_THREAD_CPUTIME_ID) < goal) {
        for (int i = 0; i < 1000; i++) x = x * 6364136223846793005ULL + 1;
    }
    return work_clock_ns(CLOCK_THREAD_CPUTIME_ID) - start;
}

#endif
