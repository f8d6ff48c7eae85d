// What arming a timer costs on this host, by how far ahead it is due: ITERATIONS timerfd arm + disarm pairs
// in a loop that never sleeps (so its wall time is its CPU time). bench/timer_cost.py builds and runs it.
//
//   timer_cost DISTANCE_NS ITERATIONS   → one JSON line: the distance and the µs per arm + disarm
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/timerfd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: timer_cost DISTANCE_NS ITERATIONS\n");
        return 2;
    }
    long distance = atol(argv[1]), n = atol(argv[2]);
    if (distance <= 0 || distance >= 1000000000L || n <= 0) {
        fprintf(stderr, "timer_cost: DISTANCE_NS in (0, 1e9), ITERATIONS > 0\n");
        return 2;
    }
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    if (fd < 0) {
        perror("timerfd_create");
        return 1;
    }
    struct itimerspec on = {{0, 0}, {0, distance}}, off = {{0, 0}, {0, 0}};
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        if (timerfd_settime(fd, 0, &on, NULL) != 0 || timerfd_settime(fd, 0, &off, NULL) != 0) {
            perror("timerfd_settime");
            return 1;
        }
    }
    double t1 = now_s();
    printf("{\"distance_ns\": %ld, \"iterations\": %ld, \"us_per_pair\": %.3f}\n", distance, n, (t1 - t0) / n * 1e6);
    close(fd);
    return 0;
}
