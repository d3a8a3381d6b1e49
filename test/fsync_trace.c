// fsync_trace.c: an LD_PRELOAD library for test_checkpoint.sh: every fsync and rename the process makes is
// logged to the file $FSYNC_TRACE, one line per call, after the call returned: "<seconds> <pid> fsync <path>"
// (the path the descriptor names: a file or a directory) or "<seconds> <pid> rename <from> <to>", the time
// from CLOCK_MONOTONIC (one clock for every process of the machine, so that the ranks' lines can be ordered).
// A crash cannot be shown to need an fsync (the page cache survives a kill -9); the order of these calls can:
// test/fsync_check.py checks it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void trace_line(const char* what, const char* a, const char* b) {
    const char* out = getenv("FSYNC_TRACE");
    if (out == NULL) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[8400];
    int n = snprintf(line, sizeof(line), "%lld.%09ld %d %s %s%s%s\n", (long long)ts.tv_sec, ts.tv_nsec, (int)getpid(), what, a,
                     b ? " " : "", b ? b : "");
    if (n <= 0) return;
    int fd = open(out, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)(n < (int)sizeof(line) ? n : (int)sizeof(line) - 1));  // (one write: lines never mix)
    (void)w;
    close(fd);
}

int fsync(int fd) {
    static int (*real)(int) = NULL;
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    char link[64], target[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, target, sizeof(target) - 1);
    target[k > 0 ? k : 0] = '\0';
    int rc = real(fd);
    if (rc == 0) trace_line("fsync", target, NULL);
    return rc;
}

int rename(const char* from, const char* to) {
    static int (*real)(const char*, const char*) = NULL;
    if (real == NULL) real = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
    int rc = real(from, to);
    if (rc == 0) trace_line("rename", from, to);
    return rc;
}
