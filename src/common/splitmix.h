/* splitmix.h — SplitMix64 (Steele, Lea & Flood 2014): advances *state and returns the next
 * 64-bit value. Used to derive seeds and offsets deterministically (simulator, fit search). */
#ifndef SSB4D_COMMON_SPLITMIX_H
#define SSB4D_COMMON_SPLITMIX_H
#include <stdint.h>

static inline uint64_t ssb4d_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
#endif
