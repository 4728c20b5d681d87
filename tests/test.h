/* test.h — the tiny unit-test harness shared by tests/unit/test_*.c.
 *
 * A test is a `static void name(void)` that uses CHECK/CHECK_EQ/...; RUN(name)
 * counts it passed when none of its checks failed. TEST_END() prints the
 * line tests/run.sh adds up ("RESULT <passed> <failed>") and returns the exit code.
 */
#ifndef LMC_TEST_H
#define LMC_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int test_passed_, test_failed_, test_cur_failed_;

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); test_cur_failed_ = 1; } } while (0)
#define CHECK_MSG(cond, ...) do { if (!(cond)) { \
    fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); test_cur_failed_ = 1; } } while (0)
#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); if (a_ != b_) { \
    fprintf(stderr, "  FAIL %s:%d: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, a_, b_); \
    test_cur_failed_ = 1; } } while (0)
#define CHECK_EQ_STR(a, b) do { const char *a_ = (a), *b_ = (b); if (!a_ || !b_ || strcmp(a_, b_) != 0) { \
    fprintf(stderr, "  FAIL %s:%d: %s == %s (\"%s\" vs \"%s\")\n", __FILE__, __LINE__, #a, #b, \
            a_ ? a_ : "(null)", b_ ? b_ : "(null)"); test_cur_failed_ = 1; } } while (0)
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); if (!(fabs(a_ - b_) <= (tol))) { \
    fprintf(stderr, "  FAIL %s:%d: %s ≈ %s (%.9g vs %.9g, tol %g)\n", __FILE__, __LINE__, #a, #b, a_, b_, \
            (double)(tol)); test_cur_failed_ = 1; } } while (0)

#define RUN(fn) do { test_cur_failed_ = 0; fn(); \
    if (test_cur_failed_) { test_failed_++; fprintf(stderr, "FAIL %s\n", #fn); } \
    else { test_passed_++; } } while (0)

#define TEST_END() (printf("RESULT %d %d\n", test_passed_, test_failed_), test_failed_ ? 1 : 0)

#endif
