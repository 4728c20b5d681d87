/* test_rng.h — the unit tests' random inputs: one xorshift64 sequence per test file, started at
 * TEST_RNG_SEED (define it before the include to change it), and the draws several files share.
 * A file's draws depend only on its own calls, so adding a test at its end leaves the earlier
 * tests' inputs as they were. */
#ifndef LMC_TEST_RNG_H
#define LMC_TEST_RNG_H

#include <math.h>
#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#endif

static uint64_t rng_state = TEST_RNG_SEED;

/* The next state of the sequence (64 bits). */
static inline uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* 32 bits of the next state. */
static inline uint32_t rnd(void) { return (uint32_t)(rng_next() >> 11); }

/* A standard normal draw (Box-Muller over two rnd() draws). */
static inline float gauss(void) {
    float u = ((float)(rnd() % 1000000) + 0.5f) / 1000000.0f, v = (float)(rnd() % 1000000) / 1000000.0f;
    return sqrtf(-2 * logf(u)) * cosf(6.2831853f * v);
}

#endif
