// The attention kernels of attention_kernels.h, written once with GCC vector extensions (16 f32 lanes) and compiled
// per ISA: the compiler lowers a 16-lane vector to one AVX-512 register, two AVX2 registers or four SSE2 ones.
// Included by exactly one translation unit per level (attention_scalar.cpp, avx2/, avx512/); the element loads use
// the conversion instructions that level has. The tile paths' GEMMs are calls into portable code
// (attention_tile_gemm): nothing of the GEMM drivers is compiled here.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/attention_kernels.h"
#include "core/fp16.h"

// Everything here has internal linkage: each translation unit compiles its own copy for its ISA, and the linker
// must never merge the AVX-512 copy of an inline function into the AVX2 or scalar code (one-definition rule).
namespace kt::cpu::attention_impl {
namespace {

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
constexpr int kLanes = 16;
// Independent accumulators per pass of Q·Kᵀ (query rows sharing each key vector) and of P·V (vectors of a row of
// o sharing each probability): 8 in AVX-512's 32 registers; a 16-lane vector is two AVX2 registers (16 of them)
// and four SSE2 ones (16), so fewer there.
// The products' inner loops and the online softmax work on the ISA's own vector width (kNativeLanes): GCC 12
// lowers arrays of 16-lane vectors to AVX2 or SSE2 through the stack (each broadcast 16 scalar stores, each
// accumulator moved through general registers), which made the AVX2 f32 attention run at ~10 GFLOP/s. Lane for
// lane the same operations, so the same bits on AVX2 and AVX-512 (the scalar level has no fused multiply-add, so
// its own).
#if defined(__AVX512F__)
constexpr int kAccumulators = 8, kNativeLanes = 16;
#elif defined(__AVX2__)
constexpr int kAccumulators = 4, kNativeLanes = 8;
#else
constexpr int kAccumulators = 2, kNativeLanes = 4;
#endif

inline v16 splat(float x) { return v16{} + x; }

typedef float vn __attribute__((vector_size(kNativeLanes * 4)));
typedef int32_t vni __attribute__((vector_size(kNativeLanes * 4)));
constexpr int kParts = kLanes / kNativeLanes;  // native vectors per 16 lanes

inline vn load_native(const float *p) {
    vn v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store_native(float *p, vn v) { std::memcpy(p, &v, sizeof v); }

inline v16 load(const float *p) {
    v16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store(float *p, v16 v) { std::memcpy(p, &v, sizeof v); }

// 16 consecutive elements as f32.
inline v16 load16(KvElem elem, const void *src) {
    if (elem == KvElem::kF32) return load(static_cast<const float *>(src));
    const uint16_t *h = static_cast<const uint16_t *>(src);
    v16 v;
    if (elem == KvElem::kBf16) {
        v16i w;
        for (int i = 0; i < kLanes; ++i) w[i] = static_cast<int32_t>(static_cast<uint32_t>(h[i]) << 16);
        std::memcpy(&v, &w, sizeof v);
        return v;
    }
#if defined(__AVX512F__)
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(h)));
    std::memcpy(&v, &x, sizeof v);
#elif defined(__F16C__)
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + 8)));
    std::memcpy(&v, &lo, 32);
    std::memcpy(reinterpret_cast<char *>(&v) + 32, &hi, 32);
#else
    for (int i = 0; i < kLanes; ++i) v[i] = fp16_to_f32(h[i]);
#endif
    return v;
}

inline size_t elem_bytes(KvElem e) { return e == KvElem::kF32 ? 4 : 2; }

// e^x for x <= 0 (softmax arguments), ~2 ulp: 2^n · p(r) with r = x - n ln 2 in [-ln2/2, ln2/2], p of degree 6;
// below -87.3 the result is 0.
// Written once for the 16-lane vectors (VF v16, VI v16i) and the native ones (vn, vni): lane for lane the same.
template <class VF, class VI>
inline VF exp_nonpositive_lanes(VF x) {
    const VF clamped = x < -87.3f ? VF{} + -87.3f : x;
    const VF n = (clamped * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest
    const VF r = (clamped - n * 0.693359375f) - n * -2.12194440e-4f;   // ln 2 in two parts
    VF p = (VF{} + 1.0f / 720) * r + (1.0f / 120);
    p = p * r + (1.0f / 24);
    p = p * r + (1.0f / 6);
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const VI e = (__builtin_convertvector(n, VI) + 127) << 23;
    VF scale;
    std::memcpy(&scale, &e, sizeof scale);
    const VF y = p * scale;
    return x < -87.3f ? VF{} : y;
}
inline v16 exp_nonpositive(v16 x) { return exp_nonpositive_lanes<v16, v16i>(x); }
inline vn exp_nonpositive_native(vn x) { return exp_nonpositive_lanes<vn, vni>(x); }
// e^x of one scalar x <= 0, as the vector versions give it.
inline float exp_nonpositive_one(float x) { return exp_nonpositive_native(vn{} + x)[0]; }

// Horizontal max and sum by halving (shuffles), not lane by lane.
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
inline v4 fold_max(v16 v) {
    const v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), b = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const v8 m8 = a > b ? a : b;
    const v4 c = __builtin_shufflevector(m8, m8, 0, 1, 2, 3), d = __builtin_shufflevector(m8, m8, 4, 5, 6, 7);
    return c > d ? c : d;
}
inline float hmax(v16 v) {
    const v4 m = fold_max(v);
    return std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
}
inline float hsum(v16 v) {
    const v8 s8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const v4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// hsum and hmax of the 16 lanes held as kParts native vectors, added in hsum's order (lanes i and i + 8, then i
// and i + 4, then pairs), so the same bits as hsum of the v16.
inline float hsum_native(const vn *parts) {
#if defined(__AVX512F__)
    return hsum(parts[0]);
#else
#if defined(__AVX2__)
    const v8 s8 = parts[0] + parts[1];
    const v4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
#else
    const v4 s4 = (parts[0] + parts[2]) + (parts[1] + parts[3]);
#endif
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
#endif
}
// The largest lane of one native vector (a max has no rounding: any order gives it).
inline float hmax_native(vn v) {
#if defined(__AVX512F__)
    return hmax(v);
#else
#if defined(__AVX2__)
    const v4 c = __builtin_shufflevector(v, v, 0, 1, 2, 3), d = __builtin_shufflevector(v, v, 4, 5, 6, 7);
    const v4 m = c > d ? c : d;
#else
    const v4 m = v;
#endif
    return std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
#endif
}

// The first position row r attends to.
inline int32_t first_visible(const AttentionArgs &a, int64_t r) {
    return a.window > 0 ? std::max(0, a.visible[r] - a.window) : 0;
}

// Covers units [0, n) in passes: f(std::integral_constant<int, W>{}, first) for W = kAccumulators units at a time,
// then 4 (AVX-512), then 1. Q·Kᵀ passes over query rows, P·V over 16-value vectors of a row of o.
template <class F>
inline void in_passes(int64_t n, F &&f) {
    int64_t i = 0;
    for (; i + kAccumulators <= n; i += kAccumulators) f(std::integral_constant<int, kAccumulators>{}, i);
    if constexpr (kAccumulators > 4)
        for (; i + 4 <= n; i += 4) f(std::integral_constant<int, 4>{}, i);
    for (; i < n; ++i) f(std::integral_constant<int, 1>{}, i);
}

// p[i][0, 16) = scale · q[i] · k for NR query rows q[i] (leading dimension Dk) and the 16 keys of a converted tile
// (kf: [Dk][16]); p's rows are p_ld apart. Full passes have no per-row condition, which left the compiler branches
// in the loop.
template <int NR>
inline void qk_rows(const float *q, int64_t Dk, const float *kf, float scale, float *p, int64_t p_ld) {
    vn acc[NR][kParts] = {};
    for (int64_t d = 0; d < Dk; ++d) {
        vn kv[kParts];
        for (int h = 0; h < kParts; ++h) kv[h] = load_native(kf + d * kLanes + h * kNativeLanes);
        for (int i = 0; i < NR; ++i)
            for (int h = 0; h < kParts; ++h) acc[i][h] += q[i * Dk + d] * kv[h];
    }
    for (int i = 0; i < NR; ++i)
        for (int h = 0; h < kParts; ++h) store_native(p + i * p_ld + h * kNativeLanes, acc[i][h] * scale);
}

// o[0, NV·16) = o · correction + Σ_c p[c] · v[c][0, NV·16), with c ascending for every element. Each of the NV
// vectors has its own accumulator: looped one output vector at a time, P·V was one chain of dependent FMAs per
// vector (4 cycles each on Zen 5) and took most of a prefill's f32 attention time.
template <int NV>
inline void pv_vectors(float *o, const float *v, int64_t v_ld, const float *p, int64_t seen, float correction) {
    constexpr int kN = NV * kParts;  // native vectors
    vn acc[kN];
    for (int j = 0; j < kN; ++j) acc[j] = load_native(o + j * kNativeLanes) * correction;
    for (int64_t c = 0; c < seen; ++c) {
        const float pc = p[c];
        for (int j = 0; j < kN; ++j) acc[j] += pc * load_native(v + c * v_ld + j * kNativeLanes);
    }
    for (int j = 0; j < kN; ++j) store_native(o + j * kNativeLanes, acc[j]);
}

// The f32 products, a step of kF32StepPositions positions at a time (attention_kernels.h): each 16-key tile is
// converted once for all rows, then every row takes its scores of the step through the online softmax and adds its
// probabilities times the values to its output. Per row and step the softmax pays a fixed cost (the running max
// and sum across lanes, the correction of the earlier output, o's loads and stores), spread over four tiles a step.
// Zen 5, bench_attention (F16 cache, Qwen3-30B-A3B heads, 2 threads), four tiles against two: AVX-512 +9 % at 4,096
// tokens and the same at 512, AVX2 +17-20 %; eight tiles ran 25-30 % slower (the scores no longer fit the registers).
inline void attend_f32(const AttentionArgs &a) {
    constexpr int64_t kStep = kF32StepPositions, kTiles = kStep / kLanes;
    const int64_t R = a.rows, Dk = a.dk, Dv = a.dv;
    const size_t eb = elem_bytes(a.elem);
    int32_t max_visible = 0, min_first = INT32_MAX;
    for (int64_t r = 0; r < R; ++r) {
        max_visible = std::max(max_visible, a.visible[r]);
        min_first = std::min(min_first, first_visible(a, r));
    }
    const int64_t n_steps = (max_visible + kStep - 1) / kStep;

    // Scratch: K tiles [kTiles][Dk][16], values [kStep][Dv] (f32), scores/probabilities [R][kStep], per-row m and l,
    // o [R][Dv].
    float *kf = a.scratch;
    float *vf = kf + kTiles * Dk * kLanes;
    float *p = vf + kStep * Dv;
    float *m = p + R * kStep;
    float *l = m + R;
    float *o = a.out;
    for (int64_t r = 0; r < R; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        std::fill_n(o + r * Dv, Dv, 0.0f);
    }
    const bool dv_vectors = Dv % kLanes == 0;
    vni lane;
    for (int i = 0; i < kNativeLanes; ++i) lane[i] = i;

    for (int64_t step = min_first / kStep; step < n_steps; ++step) {
        const int64_t pos0 = step * kStep;
        const int64_t n_pos = std::min<int64_t>(kStep, max_visible - pos0);
        for (int64_t t = 0; t * kLanes < n_pos; ++t) {
            // Convert the tile once for all rows.
            const int64_t tile_pos = pos0 + t * kLanes, tile_n = std::min<int64_t>(kLanes, n_pos - t * kLanes);
            const uint8_t *block = a.base + static_cast<size_t>(a.blocks[tile_pos / a.block_positions]) * a.block_stride;
            const int64_t in_block = tile_pos % a.block_positions;
            const uint8_t *kt = block + a.k_offset + static_cast<size_t>(in_block * Dk) * eb;  // tile in_block / 16
            float *kft = kf + t * Dk * kLanes, *vft = vf + t * kLanes * Dv;
            for (int64_t d = 0; d < Dk; ++d) store(kft + d * kLanes, load16(a.elem, kt + static_cast<size_t>(d * kLanes) * eb));
            const uint8_t *vr = block + a.v_offset + static_cast<size_t>(in_block * Dv) * eb;
            for (int64_t c = 0; c < tile_n && a.v_in_k >= 0; ++c)  // the values are rows of the converted key tile
                for (int64_t i = 0; i < Dv; ++i) vft[c * Dv + i] = kft[(a.v_in_k + i) * kLanes + c];
            for (int64_t c = 0; c < tile_n && a.v_in_k < 0; ++c) {
                int64_t i = 0;
                for (; i + kLanes <= Dv; i += kLanes) store(vft + c * Dv + i, load16(a.elem, vr + static_cast<size_t>(c * Dv + i) * eb));
                for (; i < Dv; ++i) {  // a ragged tail (Dv not a multiple of 16)
                    const uint8_t *e = vr + static_cast<size_t>(c * Dv + i) * eb;
                    vft[c * Dv + i] = a.elem == KvElem::kF32 ? *reinterpret_cast<const float *>(e)
                                      : a.elem == KvElem::kF16 ? fp16_to_f32(*reinterpret_cast<const uint16_t *>(e))
                                                               : bf16_to_f32(*reinterpret_cast<const uint16_t *>(e));
                }
            }

            // S = scale · Q Kᵀ for every row, kAccumulators rows per pass over the tile.
            float *pt = p + t * kLanes;
            in_passes(R, [&](auto rows, int64_t r0) {
                qk_rows<decltype(rows)::value>(a.q + r0 * Dk, Dk, kft, a.scale, pt + r0 * kStep, kStep);
            });
        }

        // Online softmax: mask, new max, rescale, probabilities; then o += P V.
        for (int64_t r = 0; r < R; ++r) {
            const int64_t seen = std::min<int64_t>(a.visible[r] - pos0, kStep);
            const int64_t skip = first_visible(a, r) - pos0;  // positions before the window
            if (seen <= 0 || skip >= kStep) continue;  // the whole step is in this row's future or outside its window
            // On native vectors (see pv_vectors): the tiles' lanes as kParts vectors each, the sum kept per part
            // so that hsum_native adds the 16 lanes in hsum's order.
            const int64_t parts = (seen + kLanes - 1) / kLanes * kParts;  // past the tiles every lane is masked
            float *pr = p + r * kStep;
            vn s[kTiles * kParts], top = vn{} + -INFINITY;
            for (int64_t u = 0; u < parts; ++u) {
                const vni at = lane + static_cast<int32_t>(u * kNativeLanes);
                const vni in_view = (at >= static_cast<int32_t>(skip)) & (at < static_cast<int32_t>(seen));
                s[u] = in_view ? load_native(pr + u * kNativeLanes) : vn{} + -INFINITY;
                top = top > s[u] ? top : s[u];
            }
            const float m_new = std::max(m[r], hmax_native(top));
            const float correction = exp_nonpositive_one(m[r] - m_new);
            vn sum[kParts] = {};
            for (int64_t u = 0; u < parts; ++u) {
                const vn e = exp_nonpositive_native(s[u] - m_new);
                store_native(pr + u * kNativeLanes, e);
                sum[u % kParts] += e;
            }
            l[r] = l[r] * correction + hsum_native(sum);
            m[r] = m_new;
            float *orow = o + r * Dv;
            if (dv_vectors) {
                in_passes(Dv / kLanes, [&](auto vectors, int64_t v) {
                    pv_vectors<decltype(vectors)::value>(orow + v * kLanes, vf + v * kLanes, Dv, pr, seen, correction);
                });
            } else {
                for (int64_t i = 0; i < Dv; ++i) {
                    float acc = orow[i] * correction;
                    for (int64_t c = 0; c < seen; ++c) acc += pr[c] * vf[c * Dv + i];
                    orow[i] = acc;
                }
            }
        }
    }
    for (int64_t r = 0; r < R; ++r) {
        float rescale = 1.0f;
        if (a.sinks) {  // the sink joins the softmax as one more logit with no value
            const float m_new = std::max(m[r], a.sinks[r]);
            rescale = exp_nonpositive_one(m[r] - m_new);
            l[r] = l[r] * rescale + exp_nonpositive_one(a.sinks[r] - m_new);
        }
        const float inv = rescale / l[r];
        for (int64_t i = 0; i < Dv; ++i) o[r * Dv + i] *= inv;
    }
}

// ---- bf16 products on GEMM tiles (Products::kBf16, kBf16x3) -----------------------------------------------------

typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

inline v16u bits_of(v16 x) {
    v16u u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}
inline v16 bf16_value(v16u b) {
    const v16u u = b << 16;
    v16 x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}
// bf16 of each lane, rounded to nearest even, in the low 16 bits (the inputs are finite).
inline v16u to_bf16(v16 x) {
    const v16u u = bits_of(x);
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

// The bf16 terms of 16 values: hi = bf16(x), lo = bf16(x - hi) (left zero with one term).
struct Terms {
    v16u hi, lo;
};
inline Terms terms_of(v16 x, bool split) {
    Terms t;
    t.hi = to_bf16(x);
    t.lo = split ? to_bf16(x - bf16_value(t.hi)) : v16u{};
    return t;
}

// One row of a bf16 B tile: the pairs (a[j], b[j]) of 16 columns as 32-bit words (VNNI order).
inline void store_pairs(uint8_t *dst, v16u a, v16u b) {
    const v16u w = a | (b << 16);
    std::memcpy(dst, &w, sizeof w);
}
inline void store_bf16(uint16_t *dst, v16u b) {
    const v16h h = __builtin_convertvector(b, v16h);
    std::memcpy(dst, &h, sizeof h);
}

inline v16 keep_first(v16 x, int64_t n) {
    const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    return lane < static_cast<int32_t>(n) ? x : v16{};
}
inline v16 load_first(const float *p, int64_t n) {
    if (n >= kLanes) return load(p);
    v16 v = {};
    for (int64_t i = 0; i < n; ++i) v[i] = p[i];
    return v;
}
inline float elem_value(KvElem elem, const uint8_t *e) {
    uint16_t h;
    std::memcpy(&h, e, 2);
    if (elem == KvElem::kF32) {
        float f;
        std::memcpy(&f, e, 4);
        return f;
    }
    return elem == KvElem::kF16 ? fp16_to_f32(h) : bf16_to_f32(h);
}
// Elements [0, n) of 16 consecutive ones as f32, zero after.
inline v16 load16_first(KvElem elem, const uint8_t *src, int64_t n) {
    if (n >= kLanes) return load16(elem, src);
    v16 v = {};
    for (int64_t i = 0; i < n; ++i) v[i] = elem_value(elem, src + static_cast<size_t>(i) * elem_bytes(elem));
    return v;
}

// The A side (queries, probabilities) holds the terms [hi | hi | lo], the B side (keys, values) [hi | lo | hi]:
// summed over K, hi·hi + hi·lo + lo·hi.
inline v16u a_term(const Terms &t, int segment) { return segment < 2 ? t.hi : t.lo; }
inline v16u b_term(const Terms &t, int segment) { return segment == 1 ? t.lo : t.hi; }

inline uint8_t *tile_row(uint8_t *packed, int64_t steps, int64_t panel, int64_t step, int64_t half, int64_t row) {
    return packed + ((panel * steps + step) * 2 + half) * 1024 + row * 64;
}

inline void attend_tiles(const AttentionArgs &a) {
    const int64_t R = a.rows, Dk = a.dk, Dv = a.dv, C = kAttentionChunk;
    const AttentionTilePlan plan = attention_tile_plan(R, Dk, Dv, a.products);
    const int segs = plan.segments;
    const bool split = segs == 3;
    const int64_t dkp = plan.dkp, ka = plan.ka, k_steps = ka / 32, dk_steps = dkp / 32;
    const size_t eb = elem_bytes(a.elem);
    uint16_t *qa = reinterpret_cast<uint16_t *>(a.scratch + plan.qa);
    uint8_t *kb = reinterpret_cast<uint8_t *>(a.scratch + plan.kb);
    float *S = a.scratch + plan.s;
    uint16_t *pa = reinterpret_cast<uint16_t *>(a.scratch + plan.pa);
    uint8_t *vb = reinterpret_cast<uint8_t *>(a.scratch + plan.vb);
    float *pv = a.scratch + plan.pv;
    float *m = a.scratch + plan.m, *l = a.scratch + plan.l, *corr = a.scratch + plan.correction;
    float *o = a.out;
    int32_t max_visible = 0;
    for (int64_t r = 0; r < R; ++r) max_visible = std::max(max_visible, a.visible[r]);

    // A of Q·Kᵀ: each query row scaled (so that the scores come out scaled), as its terms.
    for (int64_t r = 0; r < R; ++r) {
        uint16_t *row = qa + r * ka;
        for (int64_t d = 0; d < dkp; d += kLanes) {
            const Terms t = terms_of(load_first(a.q + r * Dk + d, std::max<int64_t>(0, Dk - d)) * a.scale, split);
            for (int sg = 0; sg < segs; ++sg) store_bf16(row + sg * dkp + d, a_term(t, sg));
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
        std::fill_n(o + r * Dv, Dv, 0.0f);
    }

    for (int64_t c0 = 0; c0 < max_visible; c0 += C) {
        const int64_t n_pos = std::min<int64_t>(C, max_visible - c0), cp = (n_pos + 31) / 32 * 32;

        // Keys [cp][ka] as B: column j of half h of panel p is position c0 + 32p + 16h + j, i.e. lane j of one
        // cache tile; tile row r of K step s holds dimensions 2r, 2r+1 of that step. Positions past the last
        // visible one are zero.
        for (int64_t p = 0; p < cp / 32; ++p)
            for (int64_t h = 0; h < 2; ++h) {
                const int64_t pos = c0 + 32 * p + 16 * h, lanes = std::clamp<int64_t>(max_visible - pos, 0, kLanes);
                const uint8_t *kt = nullptr;
                if (lanes > 0) {
                    const uint8_t *block = a.base + static_cast<size_t>(a.blocks[pos / a.block_positions]) * a.block_stride;
                    kt = block + a.k_offset + static_cast<size_t>((pos % a.block_positions) * Dk) * eb;
                }
                for (int64_t s = 0; s < dk_steps; ++s)
                    for (int64_t r = 0; r < 16; ++r) {
                        const int64_t d = 32 * s + 2 * r;
                        v16 x0 = {}, x1 = {};
                        if (lanes > 0 && d < Dk) x0 = keep_first(load16(a.elem, kt + static_cast<size_t>(d * kLanes) * eb), lanes);
                        if (lanes > 0 && d + 1 < Dk)
                            x1 = keep_first(load16(a.elem, kt + static_cast<size_t>((d + 1) * kLanes) * eb), lanes);
                        const Terms t0 = terms_of(x0, split), t1 = terms_of(x1, split);
                        for (int sg = 0; sg < segs; ++sg)
                            store_pairs(tile_row(kb, k_steps, p, sg * dk_steps + s, h, r), b_term(t0, sg), b_term(t1, sg));
                    }
            }
        attention_tile_gemm(a, kb, cp, ka, qa, ka, R, S, C);  // S [R][cp], already scaled

        // Online softmax per row over its visible positions of the chunk; P as the A of P·V ([hi | hi | lo]
        // segments of cp entries, zero past the visible ones).
        for (int64_t r = 0; r < R; ++r) {
            const int64_t seen = std::clamp<int64_t>(a.visible[r] - c0, 0, n_pos);
            uint16_t *prow = pa + r * segs * C;
            if (seen == 0) {
                std::fill_n(prow, segs * cp, uint16_t{0});
                corr[r] = 1.0f;
                continue;
            }
            const float *srow = S + r * C;
            v16 vmax = splat(-INFINITY);
            for (int64_t c = 0; c < seen; c += kLanes) {
                const v16 x = load(srow + c);
                const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
                const v16 masked = lane < static_cast<int32_t>(seen - c) ? x : splat(-INFINITY);
                vmax = vmax > masked ? vmax : masked;
            }
            const float m_new = std::max(m[r], hmax(vmax));
            corr[r] = exp_nonpositive(splat(m[r] - m_new))[0];
            v16 sum = {};
            for (int64_t c = 0; c < cp; c += kLanes) {
                const v16 e = keep_first(exp_nonpositive(load(srow + c) - m_new), seen - c);
                const Terms t = terms_of(e, split);
                sum += split ? e : bf16_value(t.hi);  // the weights the products use
                for (int sg = 0; sg < segs; ++sg) store_bf16(prow + sg * cp + c, a_term(t, sg));
            }
            l[r] = l[r] * corr[r] + hsum(sum);
            m[r] = m_new;
        }

        // Values as B of P·V: W [Dv][segs·cp], column j of half h of panel p is dimension 32p + 16h + j, tile row
        // r of K step s holds positions 2r, 2r+1 of the step (two cache rows). Past the last visible position and
        // the last dimension, zeros.
        const int64_t pos_steps = cp / 32, v_steps = segs * pos_steps, v_panels = plan.dvp / 32;
        for (int64_t s = 0; s < pos_steps; ++s)
            for (int64_t r = 0; r < 16; ++r) {
                const uint8_t *vr[2] = {nullptr, nullptr};
                for (int i = 0; i < 2; ++i) {
                    const int64_t pos = c0 + 32 * s + 2 * r + i;
                    if (pos >= max_visible) continue;
                    const uint8_t *block = a.base + static_cast<size_t>(a.blocks[pos / a.block_positions]) * a.block_stride;
                    vr[i] = block + a.v_offset + static_cast<size_t>((pos % a.block_positions) * Dv) * eb;
                }
                for (int64_t p = 0; p < v_panels; ++p)
                    for (int64_t h = 0; h < 2; ++h) {
                        const int64_t d = 32 * p + 16 * h, n = std::max<int64_t>(0, Dv - d);
                        v16 x0 = {}, x1 = {};
                        if (vr[0] && n > 0) x0 = load16_first(a.elem, vr[0] + static_cast<size_t>(d) * eb, n);
                        if (vr[1] && n > 0) x1 = load16_first(a.elem, vr[1] + static_cast<size_t>(d) * eb, n);
                        const Terms t0 = terms_of(x0, split), t1 = terms_of(x1, split);
                        for (int sg = 0; sg < segs; ++sg)
                            store_pairs(tile_row(vb, v_steps, p, sg * pos_steps + s, h, r), b_term(t0, sg), b_term(t1, sg));
                    }
            }
        attention_tile_gemm(a, vb, Dv, segs * cp, pa, segs * C, R, pv, Dv);  // pv [R][Dv]

        for (int64_t r = 0; r < R; ++r) {
            float *orow = o + r * Dv;
            const float *prow = pv + r * Dv;
            const float cr = corr[r];
            int64_t i = 0;
            for (; i + kLanes <= Dv; i += kLanes) store(orow + i, load(orow + i) * cr + load(prow + i));
            for (; i < Dv; ++i) orow[i] = orow[i] * cr + prow[i];
        }
    }
    for (int64_t r = 0; r < R; ++r) {
        const float inv = 1.0f / l[r];
        for (int64_t i = 0; i < Dv; ++i) o[r * Dv + i] *= inv;
    }
}

inline void attend(const AttentionArgs &a) {
    // The tile paths implement neither windows, sinks nor values inside the keys.
    if (a.products == Products::kF32 || a.window > 0 || a.sinks || a.v_in_k >= 0) return attend_f32(a);
    attend_tiles(a);
}

}  // namespace
}  // namespace kt::cpu::attention_impl
