/* decode_stream.cuh — one count stream decoded (qem-format §5–§6), rans.c's decode_impl with every
 * check, for the GPU's kernels (decode.cu) and, compiled for the host, for the test that holds it
 * to rans.c's integers without a device (tests/gpu/test_decode_host.cu). What a decoded value goes
 * into is the emitter's: put(j, v) for j = 0 .. n−1 in order, then finish(n). */
#ifndef SSB4D_CUDA_DECODE_STREAM_CUH
#define SSB4D_CUDA_DECODE_STREAM_CUH
#include <stdint.h>

#define RANS_L (1u << 23)
#define RANS_HI (1u << 31)
typedef unsigned long long ull;

/* What a decoded stream goes into: put(j, v) for j = 0 .. n−1 in order, then finish(n). */
struct EmitCounts { /* the calibration's block of counts, four values a store */
    uint16_t *o;
    uint32_t sum;
    uint16_t p[4];
    __host__ __device__ void put(unsigned j, uint32_t v)
    {
        p[j & 3] = (uint16_t)v;
        sum += v;
        if ((j & 3) == 3)
            *(uint2 *)(o + (j & ~3u)) = make_uint2(p[0] | (uint32_t)p[1] << 16, p[2] | (uint32_t)p[3] << 16);
    }
    __host__ __device__ void finish(unsigned n)
    {
        if (n & 3) {
            for (unsigned j = n & 3; j < 4; j++)
                p[j] = 0;
            *(uint2 *)(o + (n & ~3u)) = make_uint2(p[0] | (uint32_t)p[1] << 16, p[2] | (uint32_t)p[3] << 16);
        }
    }
};

struct EmitColumn { /* a BF pixel's column of G's input (o NULL: its total only) */
    float *o;
    uint32_t sum;
    __host__ __device__ void put(unsigned j, uint32_t v)
    {
        sum += v;
        if (o)
            o[j] = (float)v;
    }
    __host__ __device__ void finish(unsigned) {}
};

struct EmitUnflag { /* a flagged pixel's counts out of the per-scan moments */
    ull *m;
    ull row, col;
    uint32_t sum;
    __device__ void put(unsigned j, uint32_t v)
    {
        if (v) {
            ull *mj = m + 3ull * j;
            atomicAdd(mj, (ull)0 - v);
            atomicAdd(mj + 1, (ull)0 - row * v);
            atomicAdd(mj + 2, (ull)0 - col * v);
        }
    }
    __device__ void finish(unsigned) {}
};

static __host__ __device__ __forceinline__ uint32_t rd16(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8; }

/* rans.c's decode_impl: 0, or 1 for any of its errors (the host asks rans.c which). */
template <class E>
static __host__ __device__ int decode(uint32_t sel, const uint8_t *buf, uint32_t len, unsigned n, uint32_t maxval,
                             const uint8_t *slot_sym, const uint32_t *fs, E &e)
{
    switch (sel) {
    case 253: /* zero */
        if (len != 0)
            return 1;
        for (unsigned j = 0; j < n; j++)
            e.put(j, 0);
        break;
    case 255: { /* constant */
        if (len != 2)
            return 1;
        uint32_t c = rd16(buf);
        if (c > maxval)
            return 1;
        for (unsigned j = 0; j < n; j++)
            e.put(j, c);
        break;
    }
    case 254: /* literal */
        if (len != 2 * n)
            return 1;
        for (unsigned j = 0; j < n; j++) {
            uint32_t c = rd16(buf + 2 * j);
            if (c > maxval)
                return 1;
            e.put(j, c);
        }
        break;
    case 252: { /* sparse events */
        if ((len & 1) || len > 2 * n)
            return 1;
        unsigned next = 0;
        for (uint32_t k = 0; k < len; k += 2) {
            uint32_t ev = rd16(buf + k), pos = ev >> 7, val = (ev & 127) + 1;
            if (pos < next || pos >= n || val > maxval)
                return 1;
            for (; next < pos; next++)
                e.put(next, 0);
            e.put(pos, val);
            next = pos + 1;
        }
        for (; next < n; next++)
            e.put(next, 0);
        break;
    }
    default: {
        if (sel >= 64 || len < 4)
            return 1;
        const uint8_t *sym = slot_sym + sel * 1024;
        const uint32_t *tab = fs + sel * 33;
        uint32_t x = buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
        if (x < RANS_L || x >= RANS_HI)
            return 1;
        uint32_t pos = 4;
        for (unsigned j = 0; j < n; j++) {
            uint32_t slot = x & 1023u, s = sym[slot], t = tab[s];
            x = (t & 0xffffu) * (x >> 10) + slot - (t >> 16);
            while (x < RANS_L) {
                if (pos >= len)
                    return 1;
                x = x << 8 | buf[pos++];
            }
            uint32_t v = s;
            if (s == 32) {
                if (pos + 2 > len)
                    return 1;
                v = rd16(buf + pos);
                pos += 2;
                if (v > maxval)
                    return 1;
            }
            e.put(j, v);
        }
        if (x != RANS_L || pos != len)
            return 1;
    }
    }
    e.finish(n);
    return 0;
}

#endif
