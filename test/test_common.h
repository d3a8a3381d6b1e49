// test_common.h: the small harness every C++ test program shares: named checks that print one line
// each, array comparison with a stated tolerance, skips, and the closing "name: N passed, M failed,
// K skipped" line.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

static int g_passed = 0, g_failed = 0, g_skipped = 0;

// record one check: prints "ok   <what>" or "FAIL <what>"
static int check(int ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static int check(int ok, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok) g_passed++; else g_failed++;
    return ok;
}

// |a - b| <= atol + rtol * |b| elementwise; reports the worst element. NaN fails.
static int check_close(const char* what, const float* a, const float* b, size_t n, float atol, float rtol) {
    size_t worst = 0;
    double worst_excess = -1e30, max_abs_err = 0.0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)a[i] - (double)b[i]);
        double lim = atol + rtol * fabs((double)b[i]);
        if (!(err <= lim)) bad = 1;
        if (isnan(err) || err - lim > worst_excess) { worst_excess = isnan(err) ? 1e30 : err - lim; worst = i; }
        if (err > max_abs_err) max_abs_err = err;
    }
    return check(!bad, "%s: n=%zu max|err|=%.3g (atol %.1g rtol %.1g) worst [%zu] %.9g vs %.9g", what, n,
                 max_abs_err, atol, rtol, worst, n ? a[worst] : 0.0f, n ? b[worst] : 0.0f);
}

// a check that could not run here: prints "skip <what>: <why>". test/run_tests.sh counts skips and
// fails the run for any reason other than "no GPU here".
static void skip(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void skip(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("skip ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    g_skipped++;
}

static int test_summary(const char* name) {
    printf("%s: %d passed, %d failed, %d skipped\n", name, g_passed, g_failed, g_skipped);
    return g_failed == 0 ? 0 : 1;
}
