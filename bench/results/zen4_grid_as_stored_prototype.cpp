// A measurement prototype, not part of kt's build (bench/results/zen4.md, "Reading a grid format as stored"):
// a one-row GEMV over IQ2_XXS-like weights kept near their file size (an 8-bit grid index per 8 values, their 8
// sign bits, a scale code byte per 32 values, an f32 d per 256: 2.38 bits a weight), in blocks of 8 output rows,
// decoded two ways on AVX-512:
//   gather   a qword gather from the 256 x 8-byte grid per 8 indices;
//   permute  the grid as 2-bit codes (16 bits an entry: 512 bytes in 8 registers), four vpermi2w and a two-level
//            blend per 32 indices, then per 8 indices vpermw (an entry into its qword), vpmultishiftqb (its eight
//            2-bit fields into bytes) and vpermb (field to value).
//   permB    the permute decode over B = 2 or 4 blocks of 8 rows at once (perm16, perm32: independent chains).
// Signs go onto the broadcast activations (a masked subtract), the dot is vpdpbusd, scale codes multiply the int32
// group sums and d converts once per 256. Checked against a scalar loop on random data; grid values random from
// {8, 25, 43}. Build: g++ -O3 -std=c++17 zen4_grid_as_stored_prototype.cpp && ./a.out
#include <immintrin.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include <algorithm>

struct Mat {
    int64_t n, k;
    std::vector<uint8_t> idx, sgn, scl;  // [n/8][k/8][8], [n/8][k/8][8], [n/8][k/32][8]
    std::vector<float> d;                 // [n/8][k/256][8]
};
alignas(64) uint64_t grid[256];

Mat make(int64_t n, int64_t k, uint64_t seed) {
    std::mt19937_64 r(seed);
    Mat m{n, k};
    m.idx.resize(n * k / 8); m.sgn.resize(n * k / 8); m.scl.resize(n * k / 32); m.d.resize(n * k / 256);
    for (auto &v : m.idx) v = r() & 255;
    for (auto &v : m.sgn) v = r() & 255;
    for (auto &v : m.scl) v = r() & 15;
    for (auto &v : m.d) v = 1e-3f * (1 + (r() & 255));
    return m;
}

void ref(const Mat &m, const int8_t *x, float *y) {
    for (int64_t c = 0; c < m.n; ++c) {
        const int64_t cb = c / 8, cl = c % 8;
        double acc = 0;
        for (int64_t sb = 0; sb < m.k / 256; ++sb) {
            int64_t isb = 0;
            for (int g = 0; g < 8; ++g) {
                int64_t ig = 0;
                for (int j = 0; j < 4; ++j) {
                    const int64_t kc = sb * 32 + g * 4 + j;
                    const uint8_t id = m.idx[(cb * (m.k / 8) + kc) * 8 + cl];
                    const uint8_t s = m.sgn[(cb * (m.k / 8) + kc) * 8 + cl];
                    for (int e = 0; e < 8; ++e) {
                        int w = (grid[id] >> (8 * e)) & 255;
                        int a = x[kc * 8 + e];
                        if (s >> e & 1) a = -a;
                        ig += w * a;
                    }
                }
                isb += ig * (2 * m.scl[(cb * (m.k / 32) + sb * 8 + g) * 8 + cl] + 1);
            }
            acc += (double)isb * m.d[(cb * (m.k / 256) + sb) * 8 + cl];
        }
        y[c] = (float)acc;
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
void gemv(const Mat &m, const int8_t *x, float *y, int64_t n0, int64_t n1) {
    const int64_t kc8 = m.k / 8, kc32 = m.k / 32, kc256 = m.k / 256;
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t cb = n0 / 8; cb < n1 / 8; ++cb) {
        const uint8_t *idx = m.idx.data() + cb * kc8 * 8, *sgn = m.sgn.data() + cb * kc8 * 8;
        const uint8_t *scl = m.scl.data() + cb * kc32 * 8;
        const float *d = m.d.data() + cb * kc256 * 8;
        __m512 accf = _mm512_setzero_ps();
        for (int64_t sb = 0; sb < kc256; ++sb) {
            __m512i isb = zero;
            for (int g = 0; g < 8; ++g) {
                __m512i ig0 = zero, ig1 = zero;
                for (int j = 0; j < 4; j += 2) {
                    const int64_t kc = sb * 32 + g * 4 + j;
                    _mm_prefetch((const char *)(idx + (kc + 64) * 8), _MM_HINT_T1);
                    _mm_prefetch((const char *)(sgn + (kc + 64) * 8), _MM_HINT_T1);
                    const __m512i vi0 = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(idx + kc * 8)));
                    const __m512i vi1 = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(idx + kc * 8 + 8)));
                    const __m512i w0 = _mm512_i64gather_epi64(vi0, (const long long *)grid, 8);
                    const __m512i w1 = _mm512_i64gather_epi64(vi1, (const long long *)grid, 8);
                    uint64_t s0, s1;
                    std::memcpy(&s0, sgn + kc * 8, 8);
                    std::memcpy(&s1, sgn + kc * 8 + 8, 8);
                    int64_t a0, a1;
                    std::memcpy(&a0, x + kc * 8, 8);
                    std::memcpy(&a1, x + kc * 8 + 8, 8);
                    const __m512i b0 = _mm512_set1_epi64(a0), b1 = _mm512_set1_epi64(a1);
                    ig0 = _mm512_dpbusd_epi32(ig0, w0, _mm512_mask_sub_epi8(b0, _cvtu64_mask64(s0), zero, b0));
                    ig1 = _mm512_dpbusd_epi32(ig1, w1, _mm512_mask_sub_epi8(b1, _cvtu64_mask64(s1), zero, b1));
                }
                const __m128i s8 = _mm_loadl_epi64((const __m128i *)(scl + (sb * 8 + g) * 8));
                const __m512i sc = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(s8, s8));
                const __m512i odd = _mm512_add_epi32(_mm512_add_epi32(sc, sc), _mm512_set1_epi32(1));
                isb = _mm512_add_epi32(isb, _mm512_mullo_epi32(_mm512_add_epi32(ig0, ig1), odd));
            }
            const __m256 dd = _mm256_loadu_ps(d + sb * 8);
            const __m512 dpair = _mm512_permutexvar_ps(_mm512_set_epi32(7,7,6,6,5,5,4,4,3,3,2,2,1,1,0,0), _mm512_castps256_ps512(dd));
            accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isb), dpair, accf);
        }
        // lanes 2c and 2c + 1 hold column c's halves
        const __m512 sw = _mm512_permute_ps(accf, 0xB1);
        const __m512 sum = _mm512_add_ps(accf, sw);
        alignas(64) float t[16];
        _mm512_store_ps(t, sum);
        for (int c = 0; c < 8; ++c) y[cb * 8 + c] = t[2 * c];
    }
}


alignas(64) uint16_t grid_codes[256];   // 2 bits per value: value e = vals[(code >> 2e) & 3]

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
void gemv_perm(const Mat &m, const int8_t *x, float *y, int64_t n0, int64_t n1) {
    const int64_t kc8 = m.k / 8, kc32 = m.k / 32, kc256 = m.k / 256;
    const __m512i zero = _mm512_setzero_si512();
    __m512i t[8];
    for (int i = 0; i < 8; ++i) t[i] = _mm512_loadu_si512(grid_codes + 32 * i);
    // vpmultishiftqb controls: byte e of each qword takes bits [2e, 2e + 8)
    const __m512i shifts = _mm512_set1_epi64(0x0E0C0A0806040200LL);
    alignas(64) uint8_t vt[64];
    for (int i = 0; i < 64; ++i) vt[i] = (uint8_t[4]){8, 25, 43, 0}[i & 3];
    const __m512i values = _mm512_load_si512(vt);
    __m512i spread[4];  // word q*8 + c into every word of qword c
    for (int q = 0; q < 4; ++q) {
        alignas(64) uint16_t w[32];
        for (int i = 0; i < 32; ++i) w[i] = (uint16_t)(q * 8 + i / 4);
        spread[q] = _mm512_load_si512(w);
    }
    for (int64_t cb = n0 / 8; cb < n1 / 8; ++cb) {
        const uint8_t *idx = m.idx.data() + cb * kc8 * 8, *sgn = m.sgn.data() + cb * kc8 * 8;
        const uint8_t *scl = m.scl.data() + cb * kc32 * 8;
        const float *d = m.d.data() + cb * kc256 * 8;
        __m512 accf = _mm512_setzero_ps();
        for (int64_t sb = 0; sb < kc256; ++sb) {
            __m512i isb = zero;
            for (int g = 0; g < 8; ++g) {
                const int64_t kc = sb * 32 + g * 4;
                _mm_prefetch((const char *)(idx + (kc + 64) * 8), _MM_HINT_T1);
                _mm_prefetch((const char *)(sgn + (kc + 64) * 8), _MM_HINT_T1);
                const __m512i iw = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(idx + kc * 8)));
                const __m512i r0 = _mm512_permutex2var_epi16(t[0], iw, t[1]);
                const __m512i r1 = _mm512_permutex2var_epi16(t[2], iw, t[3]);
                const __m512i r2 = _mm512_permutex2var_epi16(t[4], iw, t[5]);
                const __m512i r3 = _mm512_permutex2var_epi16(t[6], iw, t[7]);
                const __mmask32 b6 = _mm512_test_epi16_mask(iw, _mm512_set1_epi16(64));
                const __mmask32 b7 = _mm512_test_epi16_mask(iw, _mm512_set1_epi16(128));
                const __m512i codes = _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, r0, r1),
                                                              _mm512_mask_blend_epi16(b6, r2, r3));
                __m512i ig = zero;
                for (int q = 0; q < 4; ++q) {
                    const __m512i wq = _mm512_permutexvar_epi8(
                        _mm512_multishift_epi64_epi8(shifts, _mm512_permutexvar_epi16(spread[q], codes)), values);
                    uint64_t s;
                    std::memcpy(&s, sgn + (kc + q) * 8, 8);
                    int64_t a;
                    std::memcpy(&a, x + (kc + q) * 8, 8);
                    const __m512i b = _mm512_set1_epi64(a);
                    ig = _mm512_dpbusd_epi32(ig, wq, _mm512_mask_sub_epi8(b, _cvtu64_mask64(s), zero, b));
                }
                const __m128i s8 = _mm_loadl_epi64((const __m128i *)(scl + (sb * 8 + g) * 8));
                const __m512i sc = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(s8, s8));
                const __m512i odd = _mm512_add_epi32(_mm512_add_epi32(sc, sc), _mm512_set1_epi32(1));
                isb = _mm512_add_epi32(isb, _mm512_mullo_epi32(ig, odd));
            }
            const __m256 dd = _mm256_loadu_ps(d + sb * 8);
            const __m512 dpair = _mm512_permutexvar_ps(_mm512_set_epi32(7,7,6,6,5,5,4,4,3,3,2,2,1,1,0,0), _mm512_castps256_ps512(dd));
            accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isb), dpair, accf);
        }
        const __m512 sum = _mm512_add_ps(accf, _mm512_permute_ps(accf, 0xB1));
        alignas(64) float tt[16];
        _mm512_store_ps(tt, sum);
        for (int c = 0; c < 8; ++c) y[cb * 8 + c] = tt[2 * c];
    }
}

template <int B>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
void gemv_permB(const Mat &m, const int8_t *x, float *y, int64_t n0, int64_t n1) {
    const int64_t kc8 = m.k / 8, kc32 = m.k / 32, kc256 = m.k / 256;
    const __m512i zero = _mm512_setzero_si512();
    __m512i t[8];
    for (int i = 0; i < 8; ++i) t[i] = _mm512_loadu_si512(grid_codes + 32 * i);
    // vpmultishiftqb controls: byte e of each qword takes bits [2e, 2e + 8)
    const __m512i shifts = _mm512_set1_epi64(0x0E0C0A0806040200LL);
    alignas(64) uint8_t vt[64];
    for (int i = 0; i < 64; ++i) vt[i] = (uint8_t[4]){8, 25, 43, 0}[i & 3];
    const __m512i values = _mm512_load_si512(vt);
    __m512i spread[4];  // word q*8 + c into every word of qword c
    for (int q = 0; q < 4; ++q) {
        alignas(64) uint16_t w[32];
        for (int i = 0; i < 32; ++i) w[i] = (uint16_t)(q * 8 + i / 4);
        spread[q] = _mm512_load_si512(w);
    }
    for (int64_t cb0 = n0 / 8; cb0 < n1 / 8; cb0 += B) {
      __m512 accfs[B];
      for (int b = 0; b < B; ++b) accfs[b] = _mm512_setzero_ps();
      for (int64_t sb = 0; sb < kc256; ++sb) {
        __m512i isbs[B];
        for (int b = 0; b < B; ++b) isbs[b] = zero;
        for (int g = 0; g < 8; ++g) {
          for (int b = 0; b < B; ++b) {
                const int64_t cb = cb0 + b;
                const uint8_t *idx = m.idx.data() + cb * kc8 * 8, *sgn = m.sgn.data() + cb * kc8 * 8;
                const uint8_t *scl = m.scl.data() + cb * kc32 * 8;
                __m512i &isb = isbs[b];
                const int64_t kc = sb * 32 + g * 4;
                _mm_prefetch((const char *)(idx + (kc + 64) * 8), _MM_HINT_T1);
                _mm_prefetch((const char *)(sgn + (kc + 64) * 8), _MM_HINT_T1);
                const __m512i iw = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(idx + kc * 8)));
                const __m512i r0 = _mm512_permutex2var_epi16(t[0], iw, t[1]);
                const __m512i r1 = _mm512_permutex2var_epi16(t[2], iw, t[3]);
                const __m512i r2 = _mm512_permutex2var_epi16(t[4], iw, t[5]);
                const __m512i r3 = _mm512_permutex2var_epi16(t[6], iw, t[7]);
                const __mmask32 b6 = _mm512_test_epi16_mask(iw, _mm512_set1_epi16(64));
                const __mmask32 b7 = _mm512_test_epi16_mask(iw, _mm512_set1_epi16(128));
                const __m512i codes = _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, r0, r1),
                                                              _mm512_mask_blend_epi16(b6, r2, r3));
                __m512i ig = zero;
                for (int q = 0; q < 4; ++q) {
                    const __m512i wq = _mm512_permutexvar_epi8(
                        _mm512_multishift_epi64_epi8(shifts, _mm512_permutexvar_epi16(spread[q], codes)), values);
                    uint64_t s;
                    std::memcpy(&s, sgn + (kc + q) * 8, 8);
                    int64_t a;
                    std::memcpy(&a, x + (kc + q) * 8, 8);
                    const __m512i b = _mm512_set1_epi64(a);
                    ig = _mm512_dpbusd_epi32(ig, wq, _mm512_mask_sub_epi8(b, _cvtu64_mask64(s), zero, b));
                }
                const __m128i s8 = _mm_loadl_epi64((const __m128i *)(scl + (sb * 8 + g) * 8));
                const __m512i sc = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(s8, s8));
                const __m512i odd = _mm512_add_epi32(_mm512_add_epi32(sc, sc), _mm512_set1_epi32(1));
                isb = _mm512_add_epi32(isb, _mm512_mullo_epi32(ig, odd));
          }
        }
        for (int b = 0; b < B; ++b) {
            const float *d = m.d.data() + (cb0 + b) * kc256 * 8;
            const __m256 dd = _mm256_loadu_ps(d + sb * 8);
            const __m512 dpair = _mm512_permutexvar_ps(_mm512_set_epi32(7,7,6,6,5,5,4,4,3,3,2,2,1,1,0,0), _mm512_castps256_ps512(dd));
            accfs[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isbs[b]), dpair, accfs[b]);
        }
      }
      for (int b = 0; b < B; ++b) {
        const __m512 sum = _mm512_add_ps(accfs[b], _mm512_permute_ps(accfs[b], 0xB1));
        alignas(64) float tt[16];
        _mm512_store_ps(tt, sum);
        for (int c = 0; c < 8; ++c) y[(cb0 + b) * 8 + c] = tt[2 * c];
      }
    }
}


int main(int argc, char **argv) {
    std::mt19937_64 r(1);
    const uint8_t vals[3] = {8, 25, 43};
    for (int i = 0; i < 256; ++i) {
        grid[i] = 0; grid_codes[i] = 0;
        for (int e = 0; e < 8; ++e) { const int c = r() % 3; grid[i] |= (uint64_t)vals[c] << (8 * e); grid_codes[i] |= c << (2 * e); }
    }
    const int64_t k = 2048;
    std::vector<int8_t> x(k);
    for (auto &v : x) v = (int8_t)((int)(r() % 255) - 127);
    {   // correctness
        Mat m = make(256, k, 5);
        std::vector<float> a(256), b(256);
        ref(m, x.data(), a.data());
        gemv(m, x.data(), b.data(), 0, 256);
        std::vector<float> p(256);
        gemv_perm(m, x.data(), p.data(), 0, 256);
        double wp = 0;
        for (int i = 0; i < 256; ++i) wp = std::max(wp, (double)std::fabs(a[i] - p[i]) / (std::fabs(a[i]) + 1e-3));
        std::printf("perm: max rel diff vs scalar %.3g\n", wp);
        gemv_permB<2>(m, x.data(), p.data(), 0, 256);
        wp = 0;
        for (int i = 0; i < 256; ++i) wp = std::max(wp, (double)std::fabs(a[i] - p[i]) / (std::fabs(a[i]) + 1e-3));
        std::printf("perm x2: max rel diff vs scalar %.3g\n", wp);
        gemv_permB<4>(m, x.data(), p.data(), 0, 256);
        wp = 0;
        for (int i = 0; i < 256; ++i) wp = std::max(wp, (double)std::fabs(a[i] - p[i]) / (std::fabs(a[i]) + 1e-3));
        std::printf("perm x4: max rel diff vs scalar %.3g\n", wp);
        double worst = 0;
        for (int i = 0; i < 256; ++i) worst = std::max(worst, (double)std::fabs(a[i] - b[i]) / (std::fabs(a[i]) + 1e-3));
        std::printf("max rel diff vs scalar %.3g\n", worst);
    }
    auto bytes = [&](const Mat &m) { return (double)(m.idx.size() + m.sgn.size() + m.scl.size() + 4 * m.d.size()); };
    for (int kind = 0; kind < 4; ++kind)
    for (int64_t n : {int64_t{256}, (int64_t{256} << 20) / k * 4}) {   // in cache; ~1 G weights (~300 MB) streaming
        Mat m = make(n, k, 7);
        std::vector<float> y(n);
        double best = 1e30;
        std::vector<double> times;
        const int reps = n == 256 ? 2000 : 12;
        for (int rep = 0; rep < reps; ++rep) {
            auto t0 = std::chrono::steady_clock::now();
            if (kind == 0) gemv(m, x.data(), y.data(), 0, n); else if (kind == 1) gemv_perm(m, x.data(), y.data(), 0, n);
            else if (kind == 2) gemv_permB<2>(m, x.data(), y.data(), 0, n); else gemv_permB<4>(m, x.data(), y.data(), 0, n);
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            times.push_back(s);
        }
        std::sort(times.begin(), times.end());
        const double med = times[times.size() / 2];
        best = times[0];
        std::printf("%s n %lld k %lld: %.2f bits/weight; median %.1f GOP/s (best %.1f), %.1f GB/s\n", (const char *[]){"gather ", "permute", "perm16 ", "perm32 "}[kind], (long long)n, (long long)k,
                    8 * bytes(m) / (double)(n * k), 2.0 * n * k / med / 1e9, 2.0 * n * k / best / 1e9, bytes(m) / med / 1e9);
    }
}
