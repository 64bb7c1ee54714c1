/* timer N CMD ARGS…: launches CMD N times (stdin, stdout and stderr on /dev/null), timing each
 * launch from before fork() to after waitpid() on CLOCK_MONOTONIC; prints one duration in ns per
 * line. With TIMER_WALL set in its environment each line also has the launch's start and end on
 * CLOCK_REALTIME, in ms (to place it beside timestamps other processes wrote). Any launch that
 * does not exit 0 (or TIMER_EXPECT, when set) is an error (exit 2). Used by scripts/bench-launch.sh and bench-claude.sh. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: timer N CMD [ARGS...]\n");
        return 2;
    }
    long n = strtol(argv[1], NULL, 10);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    int expect = getenv("TIMER_EXPECT") ? atoi(getenv("TIMER_EXPECT")) : 0;
    if (n <= 0 || null < 0) {
        fprintf(stderr, "timer: bad N or no /dev/null\n");
        return 2;
    }
    long long *t = calloc((size_t)n, sizeof *t);
    long long *wall = calloc((size_t)n * 2, sizeof *wall);
    if (!t || !wall) return 2;
    for (long i = 0; i < n; i++) {
        wall[2 * i] = clock_ns(CLOCK_REALTIME);
        long long t0 = clock_ns(CLOCK_MONOTONIC);
        pid_t pid = fork();
        if (pid < 0) { perror("timer: fork"); return 2; }
        if (pid == 0) {
            dup2(null, 0); dup2(null, 1); dup2(null, 2);
            execv(argv[2], argv + 2);
            _exit(127);
        }
        int status;
        if (waitpid(pid, &status, 0) < 0) { perror("timer: waitpid"); return 2; }
        t[i] = clock_ns(CLOCK_MONOTONIC) - t0;
        wall[2 * i + 1] = clock_ns(CLOCK_REALTIME);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != expect) {
            fprintf(stderr, "timer: %s: launch %ld: %s %d\n", argv[2], i + 1,
                    WIFEXITED(status) ? "exit status" : "killed by signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            return 2;
        }
    }
    int with_wall = getenv("TIMER_WALL") != NULL;
    for (long i = 0; i < n; i++) {
        if (with_wall)
            printf("%lld %.3f %.3f\n", t[i], wall[2 * i] / 1e6, wall[2 * i + 1] / 1e6);
        else
            printf("%lld\n", t[i]);
    }
    return 0;
}
