/* Runs several commands RUNS times each, interleaved (a, b, c, a, b, c, ...), each with the
 * same file on stdin and stdout/stderr to /dev/null, and prints the median whole-process wall
 * time of each in microseconds, one line per command.
 * usage: runner RUNS INPUT CMD1 [ARGS...] :: CMD2 [ARGS...] :: ... */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: runner RUNS INPUT CMD [ARGS] [:: CMD [ARGS]]...\n");
        return 2;
    }
    int runs = atoi(argv[1]);
    const char *input = argv[2];
    char **cmds[64];
    int ncmd = 0;
    cmds[ncmd++] = &argv[3];
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "::") == 0) {
            argv[i] = NULL;
            if (i + 1 < argc && ncmd < 64) cmds[ncmd++] = &argv[i + 1];
        }
    }
    double *times = calloc((size_t)runs * ncmd, sizeof(double));
    int devnull = open("/dev/null", O_WRONLY);
    for (int r = 0; r < runs; r++) {
        for (int c = 0; c < ncmd; c++) {
            int in = open(input, O_RDONLY);
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_adddup2(&fa, in, 0);
            posix_spawn_file_actions_adddup2(&fa, devnull, 1);
            posix_spawn_file_actions_adddup2(&fa, devnull, 2);
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            pid_t pid;
            if (posix_spawn(&pid, cmds[c][0], &fa, NULL, cmds[c], environ) != 0) {
                perror(cmds[c][0]);
                return 1;
            }
            int status;
            waitpid(pid, &status, 0);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            posix_spawn_file_actions_destroy(&fa);
            close(in);
            times[c * runs + r] = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
        }
    }
    for (int c = 0; c < ncmd; c++) {
        qsort(&times[c * runs], runs, sizeof(double), cmp);
        printf("%.1f\n", times[c * runs + runs / 2]);
    }
    return 0;
}
