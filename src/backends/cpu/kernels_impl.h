// The kernels of kernels.h, written once over a SIMD traits class S (simd_scalar.h, simd_avx2.h, simd_avx512.h) and
// instantiated by one translation unit per ISA variant.
//
// GEMM blocking: a call covers kNV = 2 column vectors (32 columns = a whole panel on AVX-512, 16 columns = one half
// panel on AVX2) and up to MR rows of activations, over the whole K. Per K step of 4 bytes the kNV weight vectors
// are decoded once and used against MR broadcast activation words, so decoding (nibble unpacking, table lookups,
// high bits) costs 1/MR per product. The int32 accumulators are flushed into fp32 at every scale group. Panels are
// the outer loop and row blocks the inner one, so a panel (32 x K) stays in L1/L2 while activation rows stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backends/cpu/kernels.h"
#include "backends/cpu/packed.h"
#include "core/fp16.h"

// For the small lambdas of the kernels' unrolled loops: inlined before anything else, the accumulators they capture
// stay in registers.
#define KT_ALWAYS_INLINE __attribute__((always_inline))

namespace kt::cpu::impl {

// The IQ4_NL / IQ4_XS code book plus 128: what the kernel feeds vpdpbusd as u; and as it is, for dot4s.
inline constexpr uint8_t kIq4Unsigned[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
inline constexpr int8_t kIq4Signed[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// The doubled e2m1 values of MXFP4 plus 12 (packed.h): small enough for the 8-bit dot products of every ISA.
inline constexpr uint8_t kMxfp4Unsigned[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

// What the kernels read of a format, from its entry in packed.h's table. kNibble: codes narrower than a byte
// (nibble tiles, and Q2_K and Q3_K in crumb tiles: kParts below).
template <PackedType T>
struct Fmt {
    static constexpr TileKind kTile = packed_type_info(T).tile;
    static constexpr bool kNibble = kTile == TileKind::kNibble || kTile == TileKind::kCrumb;
    static constexpr bool kMins = packed_type_info(T).has_mins;
    static constexpr int kUMax = packed_type_info(T).u_max;
};

// The formats whose codes are code book indices: IQ4_XS and IQ4_NL (the IQ4 book), IQ_GRID and IQ_GRID3 (the
// matrix's own).
template <PackedType T>
inline constexpr bool kMatrixBook = T == PackedType::kIqGrid || T == PackedType::kIqGrid3;
template <PackedType T>
inline constexpr bool kBookCodes = T == PackedType::kIq4Xs || T == PackedType::kIq4Nl || kMatrixBook<T>;
// Bytes of high bits per 1 KiB tile (packed.h), and per tile row.
template <PackedType T>
inline constexpr int64_t kHbitsPerTile = packed_type_info(T).hbits_per_tile;
template <PackedType T>
inline constexpr int64_t kHbitsPerRow = kHbitsPerTile<T> / 16;
// The formats with a fifth bit beside the nibble (Q5_K, Q5_0, Q5_1: one bit a code of a nibble tile).
template <PackedType T>
inline constexpr bool kFifthBit = Fmt<T>::kTile == TileKind::kNibble && kHbitsPerTile<T> == 256;
// The 32-wide GGUF formats: an f16 scale per group of 32 (gscale), and the formats with mins an f16 -m (gmin).
template <PackedType T>
inline constexpr bool kF16Groups = T == PackedType::kQ8_0 || T == PackedType::kQ4_0 || T == PackedType::kQ5_0 ||
                                   T == PackedType::kIq4Nl || T == PackedType::kQ4_1 || T == PackedType::kQ5_1;

// Codes per byte of a tile (packed.h): 4 in crumb tiles, 2 in nibble tiles, 1 in int8 tiles.
template <PackedType T>
inline constexpr int kParts = Fmt<T>::kTile == TileKind::kCrumb ? 4 : Fmt<T>::kNibble ? 2 : 1;

// Whether the integer GEMM may unroll the K steps of a row block (int_block says where it does, and why). Sanitizer
// builds (KT_SANITIZE defines KT_KERNELS_ROLLED) loop every block: with gcc 12's ASan + UBSan at -O1, unrolling took
// the AVX-512 VNNI kernels' translation unit from 31 s to 269 s to compile (59 s looped), for the same step code
// reading the same addresses.
#ifdef KT_KERNELS_ROLLED
inline constexpr bool kUnrollKernelSteps = false;
#else
inline constexpr bool kUnrollKernelSteps = true;
#endif

// Calls f(std::integral_constant<int, I>{}) for I = 0, 1, ..., N - 1, unrolled: in each call the index is a
// constant, so arrays indexed by it stay in registers and addresses derived from it become displacements.
template <int N, class F>
KT_ALWAYS_INLINE inline void static_for(F &&f) {
    [&]<int... I>(std::integer_sequence<int, I...>) KT_ALWAYS_INLINE { (f(std::integral_constant<int, I>{}), ...); }(
        std::make_integer_sequence<int, N>{});
}

template <class S, int kMR>
struct Kernels {
    using VI = typename S::VI;
    using VF = typename S::VF;
    static constexpr int kW = S::kW;
    static constexpr int kNV = 2;
    static constexpr int kCols = kNV * kW;

    // Points every entry of a kernel set at this instantiation (each ISA's translation unit calls it with its own S).
    static void fill(KernelSet *ks) {
        ks->gemm_int = &gemm_int;
        ks->gemm_bf16 = &gemm_bf16;
        ks->quantize_row = &quantize_row;
        ks->row_amax = &row_amax;
        ks->quantize_row_amax = &quantize_row_amax;
        ks->convert_row_bf16 = &convert_row_bf16;
        ks->swiglu_row = &swiglu_row;
        ks->axpy_row = &axpy_row;
        ks->merge_row = &merge_row;
        ks->unpack_panel_s8 = &unpack_panel_s8;
    }

    // The shares [n * i / parts, n * (i + 1) / parts) of n items over `parts`, for i = first, first + 1, ... in turn,
    // stepped without a division: a division per tile and side array was a visible part of a one-token GEMV.
    struct EvenShares {
        int64_t lo = 0, parts = 1, q = 0, r = 0, rem = 0;  // n = q * parts + r; rem = (r * i) mod parts
        EvenShares() = default;
        EvenShares(int64_t n, int64_t parts_, int64_t first)
            : lo(n * first / parts_), parts(parts_), q(n / parts_), r(n % parts_), rem(n * first % parts_) {}
        int64_t count() const { return q + (rem + r >= parts ? 1 : 0); }  // of share i
        void next() {
            lo += count();
            rem = rem + r >= parts ? rem + r - parts : rem + r;
        }
    };

    // What the integer GEMM prefetches, tile by tile. int_block calls at_tile once per tile, before the tile's steps,
    // so that the steps hold no prefetch and no condition: issued step by step with their conditions, the prefetches
    // of a one-row GEMV in cache took more instructions than its dot products.
    //  - kNextPanel, for a panel that several row blocks read (prefill): while the panel is computed, each row block
    //    prefetches a share of the next panel's tiles (or of the caller's next weights) and side arrays, so that
    //    the next panel is in cache when its first row block starts.
    //  - kStream, for a panel that one row block reads once (decode): the tiles and each side array are stored
    //    panel after panel (packed.h), so each is one linear stream, which the GEMV reads at its own rate. Every
    //    stream is prefetched the same time ahead: kAheadTiles tiles of the tile stream, and the same fraction of a
    //    panel of each side array (left to the hardware prefetcher, the side arrays made up to six concurrent
    //    streams, and a streaming Q6_K GEMV ran at 60 % of its rate). Past the call's last panel the tile stream
    //    goes on into the caller's next weights (prefetch_next). Decode used to prefetch the next panel too, but a
    //    panel of K = 2048 is 36 KB in Q4_K and 53 KB in Q6_K, which filled the 48 KB L1 of Zen 5 while the current
    //    panel was read. Zen 5, one core, one-token GEMV from memory (bench_gemm BM_gemv_stream, median of 6 paired
    //    rounds, stream / next panel): INT8 1.40, Q8_0 1.73, Q4_K 1.31, Q6_K 0.93 (another series 0.74); 2 or 8
    //    tiles ahead instead of 4 were within the noise, except Q4_K at 2 (-16 %).
    struct TilePrefetch {
        enum class Mode { kNone, kNextPanel, kStream };
        static constexpr int kMax = 6;
        static constexpr int64_t kAheadTiles = 4;
        Mode mode = Mode::kNone;
        // kNextPanel: tile (s, h) of the next panel at next + (s * 2 + h) * kTileBytes, for tiles s in [lo, hi).
        // kStream: where the tile stream continues past `end` (the caller's next weights), or nullptr.
        const uint8_t *next = nullptr;
        int64_t lo = 0, hi = 0;
        // The streams: kStream all of them, the tiles first; kNextPanel the next panel's side arrays.
        // base: panel 0's bytes (kNextPanel: the next panel's); per_panel: its bytes per panel; end: the bytes of the
        // call's panels (kStream); ahead: how many bytes ahead (kStream); share: tile s's share of a panel, from
        // tile lo (kNextPanel: in lines).
        int n = 0;
        const uint8_t *base[kMax] = {};
        int64_t per_panel[kMax] = {}, end[kMax] = {}, ahead[kMax] = {};
        EvenShares share[kMax];

        void add(const uint8_t *b, int64_t bytes_per_panel) {
            base[n] = b;
            per_panel[n++] = bytes_per_panel;
        }
    };

    // Where each stream of panel p has been prefetched to, stepped tile by tile (int_block's copy of the plan).
    struct PrefetchCursor {
        EvenShares share[TilePrefetch::kMax];
        int64_t done[TilePrefetch::kMax];  // kStream: the next line to prefetch

        PrefetchCursor(const TilePrefetch &tp, int64_t p) {
            for (int i = 0; i < tp.n; ++i) {
                share[i] = tp.share[i];
                done[i] = (p * tp.per_panel[i] + tp.ahead[i]) / 64;
            }
        }

        void at_tile(const TilePrefetch &tp, int64_t p, int64_t s) {
            if (tp.mode == TilePrefetch::Mode::kStream) {
                for (int i = 0; i < tp.n; ++i) {
                    share[i].next();  // share[i].lo: the bytes of the panel read once tile s is done
                    const int64_t to = (p * tp.per_panel[i] + share[i].lo + tp.ahead[i] + 63) / 64;
                    const int64_t end_line = (tp.end[i] + 63) / 64, in_end = std::min(to, end_line);
                    for (const uint8_t *q = tp.base[i] + done[i] * 64; q < tp.base[i] + in_end * 64; q += 64)
                        S::prefetch_stream(q);
                    if (i == 0 && tp.next)  // the tiles go on into the caller's next weights
                        for (int64_t l = std::max(done[i], end_line); l < to; ++l)
                            S::prefetch_stream(tp.next + (l - end_line) * 64);
                    done[i] = std::max(done[i], to);
                }
            } else if (tp.mode == TilePrefetch::Mode::kNextPanel && s >= tp.lo && s < tp.hi) {
                for (int64_t l = 0; l < 2 * kTileBytes / 64; ++l) S::prefetch(tp.next + s * 2 * kTileBytes + l * 64);
                for (int i = 0; i < tp.n; ++i) {
                    for (int64_t l = 0; l < share[i].count(); ++l) S::prefetch(tp.base[i] + (share[i].lo + l) * 64);
                    share[i].next();
                }
            }
        }
    };

    // The streams of panel p's side arrays: high bits, scales, mins.
    template <PackedType T>
    static void add_side_streams(const PackedMatrix &w, int64_t p, TilePrefetch *tp) {
        const PackedLayout &L = w.layout;
        auto add = [&](size_t offset, int64_t per_panel) {
            if (offset != 0) tp->add(w.data + offset + p * per_panel, per_panel);
        };
        add(L.hbits, L.tiles_per_half * 2 * kHbitsPerTile<T>);
        if constexpr (kGscaleBytes<T> > 0) add(L.gscale, L.groups * kPanel * kGscaleBytes<T>);
        add(L.gmin, L.groups * kPanel * kGminBytes<T>);
        add(L.sscale, L.superblocks * kPanel * kSscaleBytes<T>);
        add(L.smin, L.superblocks * kPanel * kSscaleBytes<T>);
    }

    struct VecPos {
        int half;      // which half panel
        int vi;        // which part of a 64-byte tile row (AVX2: 0 or 1)
        int byte_off;  // byte offset of that part in the tile row
        int col;       // first column in the panel
    };
    static VecPos vec_pos(int c0, int v) {
        const int col = c0 + v * kW;
        const int vi = (col % static_cast<int>(kHalf)) / kW;
        return {col / static_cast<int>(kHalf), vi, vi * kW * 4, col};
    }

    static void store_cols(float *dst, VF v, int valid) {
        if (valid >= kW)
            S::storef(dst, v);
        else if (valid > 0)
            S::storef_n(dst, v, valid);
    }

    // ---- integer formats -----------------------------------------------------------------------------------

    // Formats whose codes need the whole byte (INT8, Q8_0, IQ4_XS) on ISAs without VNNI: the kernel works with the
    // signed weights and dot4s, which needs no activation-sum correction. Both forms give the exact integer sum.
    template <PackedType T>
    static constexpr bool kSigned = S::kSignedWideDot && Fmt<T>::kUMax > 127;

    // Q4_K's high nibbles in place, where one instruction takes any unsigned byte (VNNI): the GEMM feeds a high-nibble
    // byte to the dot product as x & 0xF0, sixteen times its code, and takes that group's scale over 16 (the scale
    // cursor keeps d / 16 beside d, for the flush and for panel_scales<T, true>): one instruction per weight vector
    // and step where shifting the nibble down took two. The same bits: the group's integer sum comes out 16 times
    // larger (at most 16 * 32 * 15 * 128 < 2^24, so its conversion is exact), and the scale over 16 is exact (a power
    // of two; the smallest nonzero Q4_K scale, an f16 subnormal times a code of at least 1, is far above f32's
    // subnormals). Zen 5, in cache (bench_gemm BM_gemm_cached, K 2,048, 3 alternating rounds, best call): one row
    // 169 -> 176 GOP/s, four 449 -> 459, 128 597 -> 615, 32 unchanged.
    template <PackedType T>
    static constexpr bool kHighNibbleInPlace = T == PackedType::kQ4_K && !S::kSignedWideDot;

    // IQ_GRID3's index split where vpermb can take it (S::kMaskedLut): its low 2 bits index a table of the book's
    // first 4 entries repeated 16 times (so that the bits above them, the tile byte's other fields, select nothing),
    // and the third bit, as the mask of a second, merged lookup, the same of its last 4: two instructions fewer per
    // tile row than masking the field, merging the bit in and looking the index up (Q3_K's decode plus lut16).
    // Zen 4, one core, K 2,048 (bench_gemm, 3 alternating rounds, medians): IQ2_XXS in cache one row 111 -> 120
    // GOP/s, 128 rows 312 -> 328, four rows 273 -> 268; streaming one token 17.9 -> 19.9 GB/s.
    template <PackedType T>
    static constexpr bool kSplitLookup = T == PackedType::kIqGrid3 && S::kMaskedLut;

    // The byte tables decode looks codes up in (lut16), 16 entries repeated to fill a vector: u = value + 128 for the
    // code books (the value itself where kSigned), MXFP4's u; zero for the formats without one. IQ_GRID's and
    // IQ_GRID3's book is the matrix's (packed.h): stored signed, its u is the sign bit flipped (value + 128 mod 256).
    // `high`: the second table of kSplitLookup (there `book` holds the first), else unused.
    struct CodeTables {
        VI book, high;
    };
    template <PackedType T>
    static CodeTables lookup_table(const PackedMatrix &w) {
        if constexpr (kMatrixBook<T>) {
            VI book = S::loadu(w.data + w.layout.codebook);
            if constexpr (!kSigned<T>) book = S::xor_(book, S::set1_8(static_cast<int8_t>(0x80)));
            if constexpr (kSplitLookup<T>) {
                alignas(64) uint8_t low[64], high[64];
                for (int i = 0; i < 64; ++i) {
                    low[i] = static_cast<uint8_t>(i % 4);
                    high[i] = static_cast<uint8_t>(4 + i % 4);
                }
                return {S::lut16(book, S::loadu(low)), S::lut16(book, S::loadu(high))};
            }
            return {book, S::zero()};
        } else if constexpr (kBookCodes<T> || T == PackedType::kMxfp4) {
            alignas(64) uint8_t t[64];
            for (int i = 0; i < 64; ++i)
                t[i] = T == PackedType::kMxfp4 ? kMxfp4Unsigned[i % 16]
                       : kSigned<T>            ? static_cast<uint8_t>(kIq4Signed[i % 16])
                                               : kIq4Unsigned[i % 16];
            return {S::loadu(t), S::zero()};
        } else {
            (void)w;
            return {S::zero(), S::zero()};
        }
    }

    // kInPlace: Q4_K's high nibbles as kHighNibbleInPlace says (the GEMM), else as codes (the AMX set's unpacking).
    template <PackedType T, bool kInPlace = false>
    static VI decode(const uint8_t *row, int part, const uint8_t *hb, int vi, const CodeTables &tables) {
        const VI table = tables.book;
        if constexpr (!Fmt<T>::kNibble) {
            if constexpr (kSigned<T>) return S::loadu(row);
            return S::xor_(S::loadu(row), S::set1_8(static_cast<int8_t>(0x80)));
        } else {
            const VI x = S::loadu(row);
            if constexpr ((kBookCodes<T> || T == PackedType::kMxfp4) && kParts<T> == 2 && S::kLut16LowBitsOnly)
                return S::lut16(table, part ? S::template srl16<4>(x) : x);  // the table lookup drops the other bits
            if constexpr (T == PackedType::kQ4_0 && S::kAffineNibbles) {
                if (part) return S::high_nibbles_xor8(x);
            }
            if constexpr (kParts<T> == 4) {  // crumbs: part q at bits 2q (part is a constant where steps unroll)
                if constexpr (kSplitLookup<T>) {
                    const VI low = part == 0   ? x
                                   : part == 1 ? S::template srl16<2>(x)
                                   : part == 2 ? S::template srl16<4>(x)
                                               : S::template srl16<6>(x);
                    return S::lut4_by_bit(table, tables.high, low, hb + part * 8);
                }
                const VI field = S::and_(part == 0   ? x
                                         : part == 1 ? S::template srl16<2>(x)
                                         : part == 2 ? S::template srl16<4>(x)
                                                     : S::template srl16<6>(x),
                                         S::set1_8(3));
                if constexpr (T == PackedType::kQ3_K)
                    return S::or_(field, S::template high_bit<0x04>(hb + part * 8, vi));
                if constexpr (T == PackedType::kIqGrid3)  // the book index 0..7, as Q3_K's code
                    return S::lut16(table, S::or_(field, S::template high_bit<0x04>(hb + part * 8, vi)));
                return field;
            }
            if constexpr (kInPlace && kHighNibbleInPlace<T>)
                return S::and_(x, S::set1_8(static_cast<int8_t>(part ? 0xF0 : 0x0F)));
            const VI nib = S::and_(part ? S::template srl16<4>(x) : x, S::set1_8(0x0F));
            if constexpr (T == PackedType::kInt4 || T == PackedType::kQ4_0) return S::xor_(nib, S::set1_8(8));
            if constexpr (T == PackedType::kQ4_K || T == PackedType::kQ4_1) return nib;
            if constexpr (kFifthBit<T>) return S::or_(nib, S::template high_bit<0x10>(hb + part * 8, vi));
            if constexpr (T == PackedType::kQ6_K) return S::or_(nib, S::high_bits6(hb + part * 16, vi));
            if constexpr (kBookCodes<T> || T == PackedType::kMxfp4) return S::lut16(table, nib);
        }
    }

    // Bytes of one column's group scale in L.gscale, and of its min in L.gmin.
    template <PackedType T>
    static constexpr int64_t kGscaleBytes = T == PackedType::kInt4   ? 4
                                            : kF16Groups<T>          ? 2
                                            : T == PackedType::kInt8 ? 0
                                                                     : 1;
    template <PackedType T>
    static constexpr int64_t kGminBytes = kF16Groups<T> ? 2 : 1;
    // Bytes of one column's super-block scale in L.sscale (and of its dmin in L.smin): f16, IQ_GRID(3)'s f32.
    template <PackedType T>
    static constexpr int64_t kSscaleBytes = kMatrixBook<T> ? 4 : 2;

    // The scale arrays of panel p, walked one scale group at a time.
    // The GEMM's flush reads each group's scale (and min) through these moving pointers: indexing the arrays afresh
    // (products, a division by the super-block) took a dozen scalar instructions per group and column vector, which at
    // one activation row outweighed the vector work (perf on Zen 4: most of a one-token Q6_K GEMV's samples fell on
    // scalar instructions).
    template <PackedType T>
    struct ScaleCursor {
        const uint8_t *gscale, *gmin, *sscale, *smin;  // this group's and this super-block's entries
        int64_t groups_per_superblock, groups_left;     // groups left in this super-block
        int64_t superblocks_left;                       // this one included
        // Q4_K and Q5_K on AVX-512: this super-block's d and dmin for each column vector of the panel, converted from
        // f16 once per super-block, where load converted both per group and column vector. Zen 5, Q4_K in cache
        // (bench_gemm BM_gemm_cached, K 2,048, best of 4 alternating rounds): one row 170 -> 178 GOP/s, four 452 ->
        // 469, 32 and more within 1 %. Q6_K and IQ4_XS (one d per super-block, no min) lost 2-8 % at one row with the
        // same change, and AVX2 (four vectors a panel, in memory, of which a block reads two) lost 7 % on Q4_K at one
        // row, so they keep converting in load.
        static constexpr bool kPerSuperblock = Fmt<T>::kMins && !kF16Groups<T> && kPanel == kCols;
        static constexpr int kVecs = kPerSuperblock ? kNV : 1;
        VF d[kVecs] = {}, dmin[kVecs] = {};
        // Q4_K's high nibbles in place (kHighNibbleInPlace, VNNI only, so always per super-block): d / 16 for their
        // groups, so that the flush need not divide each group's scale. The same bits: d (an f16) times a 6-bit code
        // is exact in f32, and so is either division by 16.
        static_assert(!kHighNibbleInPlace<T> || kPerSuperblock);
        VF d_high[kHighNibbleInPlace<T> ? kVecs : 1] = {};

        ScaleCursor(const PackedMatrix &w, int64_t p) {
            const PackedLayout &L = w.layout;
            const int64_t gi = p * L.groups * kPanel, si = p * L.superblocks * kPanel;
            gscale = w.data + L.gscale + gi * kGscaleBytes<T>;
            gmin = w.data + L.gmin + gi * kGminBytes<T>;
            sscale = w.data + L.sscale + si * kSscaleBytes<T>;
            smin = w.data + L.smin + si * kSscaleBytes<T>;
            groups_per_superblock = L.superblocks > 0 ? 256 / L.group : 0;
            groups_left = L.superblocks > 0 ? (256 - L.superblock_k_offset) / L.group : 0;
            superblocks_left = L.superblocks;
            if (superblocks_left > 0) convert_superblock();
        }
        void convert_superblock() {
            if constexpr (kPerSuperblock) {
                for (int i = 0; i < kVecs; ++i) {
                    d[i] = S::loadf_f16(reinterpret_cast<const uint16_t *>(sscale) + i * kW);
                    dmin[i] = S::loadf_f16(reinterpret_cast<const uint16_t *>(smin) + i * kW);
                    if constexpr (kHighNibbleInPlace<T>) d_high[i] = S::mul(d[i], S::fset1(1.0f / 16));
                }
            }
        }
        void next() {
            gscale += kPanel * kGscaleBytes<T>;
            gmin += kPanel * kGminBytes<T>;
            if (--groups_left == 0) {
                sscale += kPanel * kSscaleBytes<T>;
                smin += kPanel * kSscaleBytes<T>;
                groups_left = groups_per_superblock;
                if (--superblocks_left > 0) convert_superblock();  // none past the panel's last group
            }
        }
        // S_g (and M_g) of the current group, for the kW columns starting at panel column `col`; S_g / 16 where the
        // GEMM feeds the group's high nibbles in place (high_in_place: part 1 of a Q4_K tile on VNNI).
        void load(int col, VF *scale, VF *min, bool high_in_place = false) const {
            const uint8_t *gs = gscale + col * kGscaleBytes<T>, *ss = sscale + col * kSscaleBytes<T>;
            if constexpr (T == PackedType::kInt4) {
                *scale = S::mul(S::loadf(reinterpret_cast<const float *>(gs)), S::fset1(16.0f));
            } else if constexpr (kF16Groups<T>) {
                *scale = S::loadf_f16(reinterpret_cast<const uint16_t *>(gs));
                if constexpr (Fmt<T>::kMins) *min = S::loadf_f16(reinterpret_cast<const uint16_t *>(gmin + col * 2));
            } else if constexpr (kMatrixBook<T>) {
                *scale = S::mul(S::loadf(reinterpret_cast<const float *>(ss)),
                                S::loadf_i8(reinterpret_cast<const int8_t *>(gs)));
            } else if constexpr (T == PackedType::kIq4Xs || T == PackedType::kQ6_K || T == PackedType::kQ3_K) {
                *scale = S::mul(S::loadf_f16(reinterpret_cast<const uint16_t *>(ss)),
                                S::loadf_i8(reinterpret_cast<const int8_t *>(gs)));
            } else if constexpr (T == PackedType::kMxfp4) {
                // 2^(e - 128) as the product of two normal powers of two, 2^(a - 127) · 2^(b - 127) with a + b = e + 126:
                // exact for every byte, including the subnormal scales of e = 0 and 1 (one factor alone cannot reach them).
                const VI e = S::cvt_round(S::loadf_u8(gs));
                const VI half = S::template srl16<1>(e);  // e < 256: the 16-bit shift is the 32-bit one
                const VI a = S::add32(half, S::set1_32(63)), b = S::add32(S::sub32(e, half), S::set1_32(63));
                *scale = S::mul(S::castf(S::sll32_23(a)), S::castf(S::sll32_23(b)));
            } else if constexpr (Fmt<T>::kMins) {  // Q2_K, Q4_K, Q5_K
                VF sc, m;
                if constexpr (T == PackedType::kQ2_K) {
                    S::loadf_u4_pairs(gs, &sc, &m);  // scale and min in one byte, as GGUF stores them
                } else {
                    sc = S::loadf_u8(gs);
                    m = S::loadf_u8(gmin + col);
                }
                if constexpr (kPerSuperblock) {
                    const VF d_group = kHighNibbleInPlace<T> && high_in_place ? d_high[col / kW] : d[col / kW];
                    *scale = S::mul(d_group, sc);
                    *min = S::mul(dmin[col / kW], m);
                } else {
                    *scale = S::mul(S::loadf_f16(reinterpret_cast<const uint16_t *>(ss)), sc);
                    *min = S::mul(S::loadf_f16(reinterpret_cast<const uint16_t *>(smin + col * 2)), m);
                }
            }
        }
    };

    // A panel's prepared scales (panel_scales) as int_block reads them, and room for a row block's group sums as
    // floats ([kMR][groups]; the formats with mins), all in the caller's scratch (gemm_scratch_bytes).
    struct PanelScales {
        float *scale = nullptr, *neg_min = nullptr, *float_sums = nullptr;
    };
    static_assert(kMR <= kMaxRowBlock);

    // Panel p's group scales S_g as fp32 [groups][kPanel], and for the formats with mins -M_g alike: what
    // ScaleCursor::load gives, computed once per panel for every row block that reads it (the integer GEMM's
    // prefill calls, the AMX set's unpacked panels). kForGemm: S_g / 16 for the groups whose high nibbles the GEMM
    // feeds in place (kHighNibbleInPlace: the groups in the second half of a 128-K tile), as its flush expects.
    template <PackedType T, bool kForGemm = false>
    static void panel_scales(const PackedMatrix &w, int64_t p, float *scale, float *neg_min) {
        const VI sign = S::set1_32(static_cast<int32_t>(0x80000000u));
        ScaleCursor<T> scales(w, p);
        for (int64_t g = 0; g < w.layout.groups; ++g, scales.next()) {
            const bool high_in_place = kForGemm && kHighNibbleInPlace<T> && (g * w.layout.group) % 128 >= 64;
            for (int col = 0; col < kPanel; col += kW) {
                VF s = S::fzero(), mn = S::fzero();
                scales.load(col, &s, &mn, high_in_place);
                S::storef(scale + g * kPanel + col, s);
                // -min by its sign bit: fma(-min, x, acc) is then fnma(min, x, acc) bit for bit, zeros included.
                if constexpr (Fmt<T>::kMins) S::storef(neg_min + g * kPanel + col, S::castf(S::xor_(S::casti(mn), sign)));
            }
        }
    }

    // The formats whose tile rows int_gemm_typed decodes once per column block when a call has several row blocks
    // and the caller lends scratch (GemmActs::scratch): those with a high-bit plane (Q3_K, Q5_K, Q6_K, Q5_0,
    // Q5_1) or a table lookup (IQ4_XS, IQ4_NL, MXFP4 and the grids), whose decoding costs more than reading 64
    // decoded bytes back from L2. Q4_K, Q4_0, Q4_1, INT4 and Q2_K decode in one or two instructions a row and lose
    // (Zen 4, bench_gemm BM_gemm_cached K 2048, 32 / 128 rows: Q4_K -3 / -2 % on AVX-512 VNNI, -10 % on AVX2; Q2_K
    // -14 % on AVX2); Q8_0 and INT8 need no decoding. Figures for the others: bench/results/zen4.md.
    template <PackedType T>
    static constexpr bool kPredecodes = T == PackedType::kQ3_K || T == PackedType::kQ5_K || T == PackedType::kQ6_K ||
                                        T == PackedType::kQ5_0 || T == PackedType::kQ5_1 || kBookCodes<T> ||
                                        T == PackedType::kMxfp4;
    // Where int_block's tile rows come from: decoded from the packed tiles (kDecode); decoded and also stored to the
    // caller's scratch (kDecodeAndStore: a call's first row block of a column block); read back from it (kReadDecoded:
    // the other whole row blocks). The scratch holds [tile][part][row][kNV] vectors of the column block, as decode gives
    // them, so the three compute the same sums bit for bit.
    enum class TileSource { kDecode, kDecodeAndStore, kReadDecoded };

    // One block: rows [0, mr) x the kNV column vectors starting at panel column c0 of panel p, whole K.
    // kKpg: K steps of 4 per scale group (4, 8, 16, 32), or 0 for one group over the whole K (kInt8).
    // prefetch: what to prefetch while this block is computed (TilePrefetch).
    // kPrepared: the scales (and mins) come from `prepared` (panel_scales, made once for all row blocks of the
    // panel), otherwise from the packed arrays (ScaleCursor); the same floats either way. Where several row
    // blocks read a panel, a block decoded each group's scales again (a dozen instructions per group and column
    // vector, a conversion and a broadcast of each row's sum for the min term).
    // kSource, decoded: where the tile rows come from (TileSource); decoded is unused with kDecode.
    template <PackedType T, int kKpg, int mr, bool kPrepared, TileSource kSource = TileSource::kDecode>
    static void int_block(const PackedMatrix &w, int64_t p, int c0, const int8_t *const *a, const int32_t *const *sums,
                          const float *a_scale, float *const *c, int valid_cols, const TilePrefetch &prefetch,
                          const PanelScales &prepared, uint8_t *decoded) {
        constexpr int kRowsPerFlush = (kKpg == 0 || kKpg > 16) ? 16 : kKpg;
        constexpr int kUMax = kHighNibbleInPlace<T> ? 0xF0 : Fmt<T>::kUMax;
        // Independent int32 accumulator chains per output vector: consecutive K steps alternate between them, so
        // that mr * kNV * kSplit chains hide the latency of an accumulating vpdpbusd (integer sums: exact in any
        // order, so the split does not change results). Short scale groups (at most 8 K steps) need no split: every
        // flush restarts the chains, so the chains of consecutive groups are independent and overlap anyway, and a
        // split costs a register copy per step and the adds that join the chains. One activation row on Zen 4,
        // in cache (bench_gemm BM_gemm_cached/<type>/avx512-vnni-bf16/1, best of 3 rounds): Q6_K 63 -> 74 GOP/s,
        // Q4_K 108 -> 123, Q4_0 136 -> 152, IQ4_XS 123 -> 134, Q8_0 150 -> 152; but Q5_K 82 -> 74, so Q5_K, whose
        // high bits go through a mask register per step, keeps its split. Q5_0 and Q5_1 decode the same high bits
        // but gain from the short groups (Zen 4, same bench, 3 alternating rounds: one row Q5_0 128 -> 133 GOP/s,
        // Q5_1 111 -> 113; 4 and 32 rows within 1 %).
        constexpr bool kShortGroups = kKpg != 0 && kKpg <= 8 && T != PackedType::kQ5_K;
        // Broadcast activations folded into vpdpbusd's memory operand (simd_avx512.h, dot4_bcst) for INT8, and for
        // the grouped formats in blocks of more than 4 rows: there the register broadcasts compete with the dots for
        // issue slots, in short blocks the folded form loses. Zen 5, in cache (bench_gemm BM_gemm_cached, best of 2
        // rounds, folded against register broadcasts): 32 and 128 rows Q4_K +13/+20 %, Q6_K +16/+23 %, Q8_0 +16/+21 %,
        // INT4 +30/+32 %, IQ4_XS +26 %; 1 row 1-9 % slower, 4 rows Q6_K -13 %, Q8_0 -15 %.
        constexpr bool kEmbedBroadcast = kKpg == 0 || mr > 4;
        constexpr int kSplit = S::kLatencyBoundDot && mr < 3 && !kShortGroups ? 4 / mr : 1;
        // The K steps of a row block unrolled (static_for) or looped. Unrolled, each step reads its tile row and its
        // activations at constant displacements; looped, GCC 12 kept a strength-reduced offset per activation row and
        // step, spilled to the stack and reloaded before each broadcast. Zen 5, in cache (bench_gemm, best of 2
        // alternating rounds, one row / four rows, prefetching as below): Q4_K 146 -> 166 / 345 -> 441 GOP/s, Q5_K,
        // Q4_0, IQ4_XS and INT4 +12 to +53 %, Q6_K +13 to +32 %. Blocks of 5 or 6 rows lost to it (INT8, INT4 and Q8_0
        // by 5-10 %: a loop of 12 dot products a step does not need it) except Q6_K (+7 %); and the 16-step groups of
        // INT8 and INT4 g128 lost 8-27 % at four rows where dot4 takes three instructions (no VNNI).
        constexpr bool kUnrollSteps = kUnrollKernelSteps && (mr == 1 || T == PackedType::kQ6_K ||
                                                             (mr <= 4 && (S::kLatencyBoundDot || kRowsPerFlush <= 8)));
        const PackedLayout &L = w.layout;
        const VecPos vp[kNV] = {vec_pos(c0, 0), vec_pos(c0, 1)};
        const CodeTables table = lookup_table<T>(w);

        // The codes with an offset (unsigned codes of signed weights): a group's first accumulator chain starts at
        // the row's activation sum for the group times minus the offset (QuantSpec), so that the integer sum comes
        // out corrected, where a subtraction per row, vector and group used to correct it in the flush. Zen 5, in
        // cache (bench_gemm BM_gemm_cached, K 2048, 3 alternating rounds): Q6_K +3-9 % at 32 rows and +6-14 % at
        // 128, INT4 g128 +11-18 % at 1 and 4 rows, the rest within 3 %; the sums were first negated here, per row
        // block, which cost Q4_0 3-6 % at 4 rows, and negated where they are made it gained 5-10 % there instead.
        // The formats with mins keep their min term in the flush: gathering their sums as floats for it made GCC
        // spill the float accumulators, and the kernel ran 3-9 % slower (a prepared block reads float copies of the
        // sums from memory instead, kFloatSums, which holds no register).
        constexpr bool kOffsetStart = !kSigned<T> && !Fmt<T>::kMins;
        VI acci[mr][kNV][kSplit];
        auto start_group = [&](int64_t g) KT_ALWAYS_INLINE {
            for (int m = 0; m < mr; ++m)
                for (int v = 0; v < kNV; ++v) {
                    acci[m][v][0] = kOffsetStart ? S::set1_32(sums[m][g]) : S::zero();
                    for (int j = 1; j < kSplit; ++j) acci[m][v][j] = S::zero();
                }
        };
        VF accf[mr][kNV];
        for (int m = 0; m < mr; ++m)
            for (int v = 0; v < kNV; ++v) accf[m][v] = S::fzero();
        start_group(0);
        auto isum = [&](int m, int v) {
            VI t = acci[m][v][0];
            for (int j = 1; j < kSplit; ++j) t = S::add32(t, acci[m][v][j]);
            return t;
        };

        ScaleCursor<T> scales(w, p);
        // Prepared: the rows' group sums as floats, converted once per block (the min term's broadcast operand).
        constexpr bool kFloatSums = kPrepared && Fmt<T>::kMins;
        float *const fsums = prepared.float_sums;
        if constexpr (kFloatSums) {
            for (int m = 0; m < mr; ++m) {
                float *row = fsums + m * L.groups;
                int64_t g = 0;
                for (; g + kW <= L.groups; g += kW) S::storef(row + g, S::cvt(S::loadu(sums[m] + g)));
                for (; g < L.groups; ++g) row[g] = static_cast<float>(sums[m][g]);
            }
        }
        auto flush = [&](int64_t g, int part) {
            for (int v = 0; v < kNV; ++v) {
                VF scale = S::fzero(), min = S::fzero();  // prepared: min holds -M_g
                if constexpr (kPrepared) {
                    scale = S::loadf(prepared.scale + g * kPanel + vp[v].col);
                    if constexpr (Fmt<T>::kMins) min = S::loadf(prepared.neg_min + g * kPanel + vp[v].col);
                } else {
                    scales.load(vp[v].col, &scale, &min, part == 1);
                }
                for (int m = 0; m < mr; ++m) {
                    accf[m][v] = S::fmadd(S::cvt(isum(m, v)), scale, accf[m][v]);
                    if constexpr (kFloatSums)  // fnmadd(M_g, ...), bit for bit
                        accf[m][v] = S::fmadd(min, S::fset1(fsums[m * L.groups + g]), accf[m][v]);
                    else if constexpr (Fmt<T>::kMins)
                        accf[m][v] = S::fnmadd(min, S::fset1(static_cast<float>(sums[m][g])), accf[m][v]);
                    if constexpr (!kOffsetStart)
                        for (int j = 0; j < kSplit; ++j) acci[m][v][j] = S::zero();
                }
            }
            if constexpr (!kPrepared) scales.next();
            if constexpr (kOffsetStart) {
                if (g + 1 < L.groups) start_group(g + 1);
            }
        };

        const int64_t tile_k4 = 16 * kParts<T>;  // K steps of 4 per tile
        PrefetchCursor prefetched(prefetch, p);
        int64_t g = 0;
        for (int64_t s = 0; s < L.tiles_per_half; ++s) {
            const uint8_t *tb[kNV];
            const uint8_t *hb[kNV] = {w.data, w.data};  // Q3_K, Q5_K and Q6_K: this tile's high bits
            for (int v = 0; v < kNV; ++v) {
                tb[v] = w.tile(p, s, vp[v].half) + vp[v].byte_off;
                const int64_t tile_index = (p * L.tiles_per_half + s) * 2 + vp[v].half;
                if constexpr (kHbitsPerTile<T> > 0) hb[v] = w.data + L.hbits + tile_index * kHbitsPerTile<T>;
            }
            prefetched.at_tile(prefetch, p, s);
            // The two parts of a nibble tile (low and high nibbles), each its row blocks of kRowsPerFlush steps.
            bool stop = false;
            auto tile_part = [&](auto part_c) KT_ALWAYS_INLINE {
                const int part = part_c;
                for (int r0 = 0; r0 < 16 && !stop; r0 += kRowsPerFlush) {
                    const int8_t *ab[mr];
                    for (int m = 0; m < mr; ++m) ab[m] = a[m] + 4 * (s * tile_k4 + part * 16 + r0);
                    const uint8_t *rows[kNV], *hrows[kNV];
                    for (int v = 0; v < kNV; ++v) {
                        rows[v] = tb[v] + r0 * kTileRowBytes;
                        hrows[v] = hb[v] + r0 * kHbitsPerRow<T>;
                    }
                    // One K step: r is a constant where the steps are unrolled, an int where they loop; j, the
                    // accumulator chain, is always a constant.
                    auto step = [&](auto r_c, auto j_c) KT_ALWAYS_INLINE {
                        const int r = r_c;
                        constexpr int j = j_c;
                        VI u[kNV];
                        // This step's vectors in the scratch (none with kDecode, where decoded is unused).
                        uint8_t *const du = kSource == TileSource::kDecode
                                                ? nullptr
                                                : decoded + ((s * kParts<T> + part) * 16 + r0 + r) * kNV * sizeof(VI);
                        if constexpr (kSource == TileSource::kReadDecoded) {
                            for (int v = 0; v < kNV; ++v) u[v] = S::loadu(du + v * sizeof(VI));
                        } else {
                            for (int v = 0; v < kNV; ++v)
                                u[v] = decode<T, true>(rows[v] + r * kTileRowBytes, part, hrows[v] + r * kHbitsPerRow<T>,
                                                       vp[v].vi, table);
                            if constexpr (kSource == TileSource::kDecodeAndStore)
                                for (int v = 0; v < kNV; ++v) S::storeu(du + v * sizeof(VI), u[v]);
                        }
                        for (int m = 0; m < mr; ++m)
                            for (int v = 0; v < kNV; ++v) {
                                if constexpr (kSigned<T>)
                                    acci[m][v][j] = S::dot4s(acci[m][v][j], u[v], S::bcst32(ab[m] + 4 * r));
                                else if constexpr (std::is_integral_v<decltype(r_c)>)
                                    acci[m][v][j] = S::template dot4_bcst<kUMax, kEmbedBroadcast>(acci[m][v][j], u[v],
                                                                                                  ab[m] + 4 * r);
                                else
                                    acci[m][v][j] = S::template dot4_bcst<kUMax, kEmbedBroadcast, 4 * decltype(r_c)::value>(
                                        acci[m][v][j], u[v], ab[m]);
                            }
                    };
                    if constexpr (kUnrollSteps) {
                        static_for<kRowsPerFlush>([&](auto r_c) KT_ALWAYS_INLINE {
                            step(r_c, std::integral_constant<int, r_c % kSplit>{});
                        });
                    } else {
                        for (int rb = 0; rb < kRowsPerFlush; rb += kSplit)
                            static_for<kSplit>([&](auto j_c) KT_ALWAYS_INLINE { step(rb + j_c, j_c); });
                    }
                    if constexpr (kKpg != 0 && kKpg <= 16) {
                        flush(g, part);
                        if (++g == L.groups) stop = true;
                    }
                }
                if (kKpg == 32 && part == 1) {
                    flush(g, part);
                    if (++g == L.groups) stop = true;
                }
            };
            if constexpr (kUnrollKernelSteps) {
                static_for<kParts<T>>(tile_part);
            } else {
                for (int part = 0; part < kParts<T>; ++part) tile_part(part);
            }
            if (stop) break;
        }
        for (int m = 0; m < mr; ++m) {
            const VF as = S::fset1(a_scale[m]);
            for (int v = 0; v < kNV; ++v) {
                VF out;
                if constexpr (kKpg == 0) {  // kInt8: (float(isum) * w_scale) * a_scale
                    const VF wscale = S::loadf(reinterpret_cast<const float *>(w.data + L.colscale) + p * kPanel + vp[v].col);
                    out = S::mul(S::mul(S::cvt(isum(m, v)), wscale), as);  // exact: started at the offset's term
                } else {
                    out = S::mul(accf[m][v], as);
                }
                store_cols(c[m] + v * kW, out, valid_cols - v * kW);
            }
        }
    }

    // Rows per block of format T's integer kernel: the set's kMR, except where a format's K step needs more
    // registers than the set leaves beside kMR rows' accumulators (kNV int32 and kNV fp32 vectors a row), so that GCC
    // keeps some of them in memory and every flush loads and stores them. Without VNNI a dot product takes two
    // temporaries of its own, and Q6_K's and Q3_K's decode (a high-bit plane) the most of any format.
    //  - AVX2 (16 registers) computes 4 rows, but Q8_0 (a signed dot: two more temporaries), Q6_K, Q3_K and
    //    IQ_GRID3 keep 2: Zen 4 running the AVX2 set, one core in cache, 4 rows against 2: INT8 +7-9 %, Q4_K +6-10 %,
    //    Q5_K, Q2_K, Q4_1, Q5_1, MXFP4 +5-13 %, Q4_0, Q5_0, IQ4_XS, IQ4_NL, IQ_GRID, INT4 +2-5 %, BF16 +8-13 %; Q8_0
    //    -4 to -12 %, Q6_K, Q3_K and IQ_GRID3 -2 to +3 %.
    //  - AVX-512 without VNNI (32 registers) computes 6 rows, but Q6_K and Q3_K 4: same host and bench, the two
    //    VNNI-less sets, 4 rows against 6: Q6_K +7-18 % from 16 rows up, Q3_K +2-9 %; Q8_0, Q5_K and IQ_GRID3 lost up
    //    to 15 % and keep 6. The VNNI sets keep 6 for all (the same formats at 4 rows: -5 to +4 %).
    // bench/results/zen4.md has the tables.
    template <PackedType T>
    static constexpr int kRowBlock =
        S::kW == 8 ? (T == PackedType::kQ8_0 || T == PackedType::kQ6_K || T == PackedType::kQ3_K ||
                              T == PackedType::kIqGrid3
                          ? std::min(kMR, 2)
                          : kMR)
        : !S::kLatencyBoundDot && (T == PackedType::kQ6_K || T == PackedType::kQ3_K) ? std::min(kMR, 4)
                                                                                     : kMR;

    template <PackedType T, int kKpg>
    static void int_gemm_typed(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end,
                               float *c, int64_t ldc) {
        constexpr int kRows = kRowBlock<T>;
        const int64_t p_end = (n_end + kPanel - 1) / kPanel;
        const int64_t blocks = (m + kRows - 1) / kRows, tiles = w.layout.tiles_per_half;
        TilePrefetch stream;  // a one-pass call's streams (blocks == 1)
        if (blocks == 1) {
            stream.mode = TilePrefetch::Mode::kStream;
            stream.next = a.prefetch_next;
            stream.add(w.data, tiles * 2 * kTileBytes);
            add_side_streams<T>(w, 0, &stream);
            for (int i = 0; i < stream.n; ++i) {
                stream.end[i] = p_end * stream.per_panel[i];
                stream.ahead[i] = TilePrefetch::kAheadTiles * stream.per_panel[i] / tiles;
                stream.share[i] = EvenShares(stream.per_panel[i], tiles, 0);
            }
        }
        const TilePrefetch no_prefetch;
        // Several row blocks per panel: the scales (and mins) of the K-quants prepared once per panel (int_block,
        // kPrepared). Zen 5, in cache (bench_gemm BM_gemm_cached, K 2048, best of 2 alternating rounds): Q4_K +5 %
        // at 32 rows and +8 % at 128, Q5_K +7 / +6 %; Q6_K +3 / +0 % (median of 6 pairs). The formats whose scale is
        // one load gained nothing (Q8_0, Q4_0 and INT4 2-5 % slower, best of 3). Q4_1 and Q5_1 (an f16 scale and min
        // per group) lost it on VNNI and gain it without (Zen 4, same bench, 3 alternating rounds, 32 / 128 rows:
        // AVX-512 VNNI -3 / -3 %, AVX-512 +1 / +2 %, AVX2 +4 / +4 %).
        // Both need the caller's scratch (gemm_scratch_bytes): the prepared scales after the decoded tile rows.
        constexpr bool kPrepares = (Fmt<T>::kMins && !(kF16Groups<T> && S::kLatencyBoundDot)) ||
                                   T == PackedType::kQ6_K || T == PackedType::kQ3_K;
        uint8_t *const scratch = blocks > 1 ? a.scratch : nullptr;
        const bool prepare = kPrepares && scratch;
        PanelScales prepared;
        if (prepare) {  // [groups][kPanel] scales, as many -mins, then the row block's sums
            prepared.scale = reinterpret_cast<float *>(scratch + decode_scratch_bytes(w.layout));
            prepared.neg_min = prepared.scale + w.layout.groups * kPanel;
            prepared.float_sums = prepared.neg_min + w.layout.groups * kPanel;
        }
        // With the caller's scratch, a call of several row blocks decodes each column block's tile rows once
        // (kPredecodes).
        uint8_t *const decoded = kPredecodes<T> ? scratch : nullptr;
        for (int64_t p = n_begin / kPanel; p < p_end; ++p) {
            if (prepare) panel_scales<T, true>(w, p, prepared.scale, prepared.neg_min);
            for (int c0 = 0; c0 < kPanel; c0 += kCols) {
                const int valid = static_cast<int>(std::min<int64_t>(kPanel, n_end - p * kPanel)) - c0;
                if (valid <= 0) break;
                // The panel's first column block prefetches for the whole panel (an AVX2 block reads half of it):
                // the stream ahead in a one-pass call (kStream), or, where several row blocks reuse the panel,
                // a share of the next panel per row block (kNextPanel): tiles [lo, hi) and the side arrays' lines
                // from share[i], block after block. The plan is made once per panel and stepped from block to
                // block: made per block, with its zeroing and the divisions of its shares, this function's own samples
                // were 2.3 % of a 512-token prompt's against 50 % in Q4_K's blocks; made per panel, 1.1 % (perf, Zen 5).
                TilePrefetch next_panel;
                const TilePrefetch *prefetch = &no_prefetch;
                if (c0 == 0 && blocks == 1) {
                    prefetch = &stream;
                } else if (c0 == 0 && (p + 1 < p_end || a.prefetch_next)) {
                    next_panel.mode = TilePrefetch::Mode::kNextPanel;
                    next_panel.next = p + 1 < p_end ? w.tile(p + 1, 0, 0) : a.prefetch_next;
                    if (p + 1 < p_end) add_side_streams<T>(w, p + 1, &next_panel);
                    for (int i = 0; i < next_panel.n; ++i)
                        next_panel.share[i] = EvenShares((next_panel.per_panel[i] + 63) / 64, tiles, 0);
                    prefetch = &next_panel;
                }
                EvenShares tile_share(tiles, blocks, 0);  // row block i0 / kRows prefetches tiles [lo, lo + count)
                for (int64_t i0 = 0; i0 < m; i0 += kRows) {
                    const int mr = static_cast<int>(std::min<int64_t>(kRows, m - i0));
                    const int8_t *ap[kRows];
                    const int32_t *sp[kRows];
                    float sc[kRows];
                    float *cp[kRows];
                    for (int i = 0; i < mr; ++i) {
                        const int64_t row = a.rows ? a.rows[i0 + i] : i0 + i;
                        ap[i] = a.q + row * a.q_ld;
                        sp[i] = a.sums + row * a.sums_ld;
                        sc[i] = a.scale[row];
                        cp[i] = c + (i0 + i) * ldc + (p * kPanel + c0 - n_begin);
                    }
                    if (prefetch == &next_panel) {
                        next_panel.lo = tile_share.lo;
                        next_panel.hi = tile_share.lo + tile_share.count();
                    }
                    // Whole row blocks store (the first) or read back the decoded tile rows; a last, shorter block
                    // decodes for itself: one instantiation per source, not one per row count (with one per row
                    // count, gcc 12 -O3 took the AVX-512 VNNI GFNI/VBMI kernels' unit from 50 to 83 s; now 56-61 s).
                    if (decoded && mr == kRows) {
                        if constexpr (kPredecodes<T>) {  // (decoded is nullptr for the other formats; prepare is kPrepares)
                            if (i0 == 0)
                                int_block<T, kKpg, kRows, kPrepares, TileSource::kDecodeAndStore>(
                                    w, p, c0, ap, sp, sc, cp, valid, *prefetch, prepared, decoded);
                            else
                                int_block<T, kKpg, kRows, kPrepares, TileSource::kReadDecoded>(
                                    w, p, c0, ap, sp, sc, cp, valid, *prefetch, prepared, decoded);
                        }
                    } else if (prepare) {  // (one instantiation for the formats that never prepare)
                        dispatch_mr<T, kKpg, kPrepares, kRows>(mr, w, p, c0, ap, sp, sc, cp, valid, *prefetch, prepared);
                    } else {
                        dispatch_mr<T, kKpg, false, kRows>(mr, w, p, c0, ap, sp, sc, cp, valid, *prefetch, prepared);
                    }
                    if (prefetch == &next_panel) {
                        for (int i = 0; i < next_panel.n; ++i)
                            for (int64_t t = next_panel.lo; t < next_panel.hi; ++t) next_panel.share[i].next();
                        tile_share.next();
                    }
                }
            }
        }
    }

    template <PackedType T, int kKpg, bool kPrepared, int mr>
    static void dispatch_mr(int n, const PackedMatrix &w, int64_t p, int c0, const int8_t *const *a,
                            const int32_t *const *sums, const float *a_scale, float *const *c, int valid,
                            const TilePrefetch &prefetch, const PanelScales &prepared) {
        if constexpr (mr > 1) {
            if (n < mr)
                return dispatch_mr<T, kKpg, kPrepared, mr - 1>(n, w, p, c0, a, sums, a_scale, c, valid, prefetch, prepared);
        }
        int_block<T, kKpg, mr, kPrepared>(w, p, c0, a, sums, a_scale, c, valid, prefetch, prepared, nullptr);
    }

    static void gemm_int(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                         int64_t ldc) {
        switch (w.layout.type) {
            case PackedType::kInt8: return int_gemm_typed<PackedType::kInt8, 0>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kInt4:
                if (w.layout.group == 32) return int_gemm_typed<PackedType::kInt4, 8>(w, a, m, n_begin, n_end, c, ldc);
                if (w.layout.group == 64) return int_gemm_typed<PackedType::kInt4, 16>(w, a, m, n_begin, n_end, c, ldc);
                return int_gemm_typed<PackedType::kInt4, 32>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ8_0: return int_gemm_typed<PackedType::kQ8_0, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ4_0: return int_gemm_typed<PackedType::kQ4_0, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ4_K: return int_gemm_typed<PackedType::kQ4_K, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ5_K: return int_gemm_typed<PackedType::kQ5_K, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ6_K: return int_gemm_typed<PackedType::kQ6_K, 4>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kIq4Xs: return int_gemm_typed<PackedType::kIq4Xs, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kMxfp4: return int_gemm_typed<PackedType::kMxfp4, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ2_K: return int_gemm_typed<PackedType::kQ2_K, 4>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ3_K: return int_gemm_typed<PackedType::kQ3_K, 4>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ5_0: return int_gemm_typed<PackedType::kQ5_0, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kIq4Nl: return int_gemm_typed<PackedType::kIq4Nl, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ4_1: return int_gemm_typed<PackedType::kQ4_1, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kQ5_1: return int_gemm_typed<PackedType::kQ5_1, 8>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kIqGrid:
                if (w.layout.group == 32) return int_gemm_typed<PackedType::kIqGrid, 8>(w, a, m, n_begin, n_end, c, ldc);
                return int_gemm_typed<PackedType::kIqGrid, 4>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kIqGrid3:
                if (w.layout.group == 32)
                    return int_gemm_typed<PackedType::kIqGrid3, 8>(w, a, m, n_begin, n_end, c, ldc);
                return int_gemm_typed<PackedType::kIqGrid3, 4>(w, a, m, n_begin, n_end, c, ldc);
            case PackedType::kBf16: break;
        }
    }

    // ---- the group-wise formats as the AMX set reads them -----------------------------------------------------

    // The signed code w_q of each byte the GEMM above decodes to u: u - u_offset (formats with mins: u itself), so
    // that sum(w_q * a_q) over a group is the exact integer the GEMM scales, with or without VNNI.
    template <PackedType T>
    static VI signed_code(VI u, VI u_offset) {
        if constexpr (Fmt<T>::kMins || kSigned<T>) return u;
        return S::sub8(u, u_offset);
    }

    // With prefetch_next, panel p + 1's tiles and side arrays are prefetched while panel p is decoded, one share per
    // 64-K step, so that they stream in during the AMX kernel's work on panel p.
    template <PackedType T>
    static void unpack_typed(const PackedMatrix &w, int64_t p, int8_t *tiles, float *scale, float *neg_min,
                             bool prefetch_next) {
        const PackedLayout &L = w.layout;
        const int64_t steps = (L.k + 63) / 64;  // 64-K steps; a nibble tile holds two (its low and high nibbles)
        const bool prefetching = prefetch_next && p + 1 < L.panels;
        TilePrefetch side;  // the next panel's side arrays
        if (prefetching) add_side_streams<T>(w, p + 1, &side);
        const int64_t tile_lines = L.tiles_per_half * 2 * kTileBytes / 64;
        auto prefetch_share = [&](int64_t t) {  // step t's share of the next panel
            if (!prefetching) return;
            const uint8_t *next_tiles = w.tile(p + 1, 0, 0);
            for (int64_t l = tile_lines * t / steps; l < tile_lines * (t + 1) / steps; ++l) S::prefetch(next_tiles + l * 64);
            for (int i = 0; i < side.n; ++i) {
                const int64_t lines = (side.per_panel[i] + 63) / 64;
                for (int64_t l = lines * t / steps; l < lines * (t + 1) / steps; ++l) S::prefetch(side.base[i] + l * 64);
            }
        };
        if (!tiles)
            for (int64_t t = 0; t < steps; ++t) prefetch_share(t);
        if (tiles) {
            const CodeTables table = lookup_table<T>(w);
            const VI u_offset = S::set1_8(static_cast<int8_t>(packed_type_info(T).u_offset));
            for (int64_t t = 0; t < steps; ++t) {
                prefetch_share(t);
                for (int h = 0; h < 2; ++h) {
                    int8_t *dst = tiles + (t * 2 + h) * kTileBytes;
                    if constexpr (!Fmt<T>::kNibble) {
                        std::memcpy(dst, w.tile(p, t, h), kTileBytes);  // the int8 codes are stored as they are
                    } else {
                        const int64_t s = t / kParts<T>;
                        const int part = static_cast<int>(t % kParts<T>);
                        const uint8_t *src = w.tile(p, s, h);
                        const int64_t tile_index = (p * L.tiles_per_half + s) * 2 + h;
                        for (int r = 0; r < 16; ++r) {
                            const uint8_t *row_hb = nullptr;
                            if constexpr (kHbitsPerTile<T> > 0)
                                row_hb = w.data + L.hbits + tile_index * kHbitsPerTile<T> + r * kHbitsPerRow<T>;
                            for (int vi = 0; vi * kW * 4 < kTileRowBytes; ++vi) {
                                const int off = r * static_cast<int>(kTileRowBytes) + vi * kW * 4;
                                S::storeu(dst + off, signed_code<T>(decode<T>(src + off, part, row_hb, vi, table), u_offset));
                            }
                        }
                    }
                }
            }
        }
        panel_scales<T>(w, p, scale, neg_min);
    }

    static void unpack_panel_s8(const PackedMatrix &w, int64_t p, int8_t *tiles, float *scale, float *neg_min,
                                bool prefetch_next) {
        const bool pf = prefetch_next;
        switch (w.layout.type) {
            case PackedType::kInt4: return unpack_typed<PackedType::kInt4>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ8_0: return unpack_typed<PackedType::kQ8_0>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ4_0: return unpack_typed<PackedType::kQ4_0>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ4_K: return unpack_typed<PackedType::kQ4_K>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ5_K: return unpack_typed<PackedType::kQ5_K>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ6_K: return unpack_typed<PackedType::kQ6_K>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kIq4Xs: return unpack_typed<PackedType::kIq4Xs>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ2_K: return unpack_typed<PackedType::kQ2_K>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ3_K: return unpack_typed<PackedType::kQ3_K>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ5_0: return unpack_typed<PackedType::kQ5_0>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kIq4Nl: return unpack_typed<PackedType::kIq4Nl>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ4_1: return unpack_typed<PackedType::kQ4_1>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kQ5_1: return unpack_typed<PackedType::kQ5_1>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kIqGrid: return unpack_typed<PackedType::kIqGrid>(w, p, tiles, scale, neg_min, pf);
            case PackedType::kIqGrid3: return unpack_typed<PackedType::kIqGrid3>(w, p, tiles, scale, neg_min, pf);
            default: break;  // INT8, BF16 and any type added later: not group-wise, nothing to unpack
        }
    }

    // ---- bf16 ----------------------------------------------------------------------------------------------

    template <int mr>
    static void bf16_block(const PackedMatrix &w, int64_t p, int c0, const uint16_t *const *a, float *const *c,
                           int valid_cols, const uint8_t *pf, int64_t pf_lo, int64_t pf_hi) {
        const PackedLayout &L = w.layout;
        const VecPos vp[kNV] = {vec_pos(c0, 0), vec_pos(c0, 1)};
        // Two fp32 chains per output vector (even and odd K pairs), on every ISA, so that results stay the same bits
        // everywhere: vdpbf16ps accumulates into its destination, and 2 x mr x kNV chains hide its latency.
        constexpr int kSplit = 2;
        VF acc[mr][kNV][kSplit];
        for (int m = 0; m < mr; ++m)
            for (int v = 0; v < kNV; ++v)
                for (int j = 0; j < kSplit; ++j) acc[m][v][j] = S::fzero();
        for (int64_t s = 0; s < L.tiles_per_half; ++s) {
            const uint8_t *tb[kNV];
            const uint8_t *pb[kNV] = {nullptr, nullptr};
            const bool prefetching = pf && s >= pf_lo && s < pf_hi;
            for (int v = 0; v < kNV; ++v) {
                tb[v] = w.tile(p, s, vp[v].half) + vp[v].byte_off;
                if (prefetching) pb[v] = pf + (s * 2 + vp[v].half) * kTileBytes + vp[v].byte_off;
            }
            for (int r0 = 0; r0 < 16; r0 += kSplit) {
                for (int j = 0; j < kSplit; ++j) {
                    const int r = r0 + j;
                    const int64_t pair = s * 16 + r;
                    VI wv[kNV];
                    for (int v = 0; v < kNV; ++v) {
                        if (prefetching && (kW == 16 || vp[v].vi == 0)) S::prefetch(pb[v] + r * kTileRowBytes);
                        wv[v] = S::loadu(tb[v] + r * kTileRowBytes);
                    }
                    for (int m = 0; m < mr; ++m)
                        for (int v = 0; v < kNV; ++v) acc[m][v][j] = S::dot2_bf16_bcst(acc[m][v][j], wv[v], a[m] + 2 * pair);
                }
            }
        }
        for (int m = 0; m < mr; ++m)
            for (int v = 0; v < kNV; ++v)
                store_cols(c[m] + v * kW, S::add(acc[m][v][0], acc[m][v][1]), valid_cols - v * kW);
    }

    template <int mr = kMR>
    static void dispatch_bf16(int n, const PackedMatrix &w, int64_t p, int c0, const uint16_t *const *a,
                              float *const *c, int valid, const uint8_t *pf, int64_t pf_lo, int64_t pf_hi) {
        if constexpr (mr > 1) {
            if (n < mr) return dispatch_bf16<mr - 1>(n, w, p, c0, a, c, valid, pf, pf_lo, pf_hi);
        }
        bf16_block<mr>(w, p, c0, a, c, valid, pf, pf_lo, pf_hi);
    }

    static void gemm_bf16(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end,
                          float *c, int64_t ldc) {
        const int64_t p_end = (n_end + kPanel - 1) / kPanel;
        for (int64_t p = n_begin / kPanel; p < p_end; ++p) {
            for (int c0 = 0; c0 < kPanel; c0 += kCols) {
                const int valid = static_cast<int>(std::min<int64_t>(kPanel, n_end - p * kPanel)) - c0;
                if (valid <= 0) break;
                for (int64_t i0 = 0; i0 < m; i0 += kMR) {
                    const int mr = static_cast<int>(std::min<int64_t>(kMR, m - i0));
                    const uint16_t *ap[kMR];
                    float *cp[kMR];
                    for (int i = 0; i < mr; ++i) {
                        const int64_t row = a.rows ? a.rows[i0 + i] : i0 + i;
                        ap[i] = a.bf16 + row * a.bf16_ld;
                        cp[i] = c + (i0 + i) * ldc + (p * kPanel + c0 - n_begin);
                    }
                    const uint8_t *pf = p + 1 < p_end ? w.tile(p + 1, 0, 0) : a.prefetch_next;
                    const int64_t blocks = (m + kMR - 1) / kMR, bi = i0 / kMR, tiles = w.layout.tiles_per_half;
                    dispatch_bf16(mr, w, p, c0, ap, cp, valid, pf, tiles * bi / blocks, tiles * (bi + 1) / blocks);
                }
            }
        }
    }

    // ---- rows ----------------------------------------------------------------------------------------------

    static VF load_src(const void *src, bool bf16, int64_t i) {
        return bf16 ? S::loadf_bf16(static_cast<const uint16_t *>(src) + i) : S::loadf(static_cast<const float *>(src) + i);
    }
    // The last n < kW values of a row, zero-padded (so tails run the same vector code as the body).
    static VF load_src_tail(const void *src, bool bf16, int64_t i, int64_t n) {
        alignas(64) float tmp[kW] = {};
        for (int64_t j = 0; j < n; ++j)
            tmp[j] = bf16 ? bf16_to_f32(static_cast<const uint16_t *>(src)[i + j]) : static_cast<const float *>(src)[i + j];
        return S::loadf(tmp);
    }

    static float row_amax(const void *src, bool src_bf16, int64_t k) {
        VF vmax = S::fzero();
        int64_t i = 0;
        for (; i + kW <= k; i += kW) vmax = S::fmax(vmax, S::fabs(load_src(src, src_bf16, i)));
        if (i < k) vmax = S::fmax(vmax, S::fabs(load_src_tail(src, src_bf16, i, k - i)));
        return S::hmax(vmax);
    }

    static float quantize_row_amax(const void *src, bool src_bf16, int64_t k, int64_t kp, float amax, int8_t *q) {
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        const VF vinv = S::fset1(inv);
        int64_t i = 0;
        for (; i + kW <= k; i += kW) S::store_i8(q + i, S::cvt_round(S::mul(load_src(src, src_bf16, i), vinv)));
        if (i < k) {
            alignas(64) int8_t tmp[kW];
            S::store_i8(tmp, S::cvt_round(S::mul(load_src_tail(src, src_bf16, i, k - i), vinv)));
            std::memcpy(q + i, tmp, static_cast<size_t>(k - i));
        }
        if (kp > k) std::memset(q + k, 0, static_cast<size_t>(kp - k));
        return amax / 127.0f;
    }

    static float quantize_row(const void *src, bool src_bf16, int64_t k, int64_t kp, int8_t *q) {
        return quantize_row_amax(src, src_bf16, k, kp, row_amax(src, src_bf16, k), q);
    }

    static void convert_row_bf16(const void *src, bool src_bf16, int64_t k, int64_t kp, uint16_t *dst) {
        int64_t i = 0;
        for (; i + kW <= k; i += kW) S::storef_bf16(dst + i, load_src(src, src_bf16, i));
        if (i < k) {
            alignas(64) uint16_t tmp[kW];
            S::storef_bf16(tmp, load_src_tail(src, src_bf16, i, k - i));
            std::memcpy(dst + i, tmp, sizeof(uint16_t) * static_cast<size_t>(k - i));
        }
        for (int64_t j = k; j < kp; ++j) dst[j] = 0;
    }

    // exp(x): x = n ln2 + r with n = round(x / ln2) and r reduced in two steps (Cody-Waite), exp(r) by a degree-7
    // Taylor polynomial (|r| <= ln2 / 2: truncation error < 6e-9), times 2^n built in the exponent bits. x is
    // clamped to [-87.3, 88.3] so that 2^n stays a normal float.
    static VF exp_v(VF x) {
        x = S::fmin(S::fmax(x, S::fset1(-87.3f)), S::fset1(88.3f));
        const VF n = S::round_even(S::mul(x, S::fset1(1.44269504088896341f)));
        VF r = S::fnmadd(n, S::fset1(0.693359375f), x);
        r = S::fnmadd(n, S::fset1(-2.12194440e-4f), r);
        VF p = S::fset1(1.0f / 5040.0f);
        p = S::fmadd(p, r, S::fset1(1.0f / 720.0f));
        p = S::fmadd(p, r, S::fset1(1.0f / 120.0f));
        p = S::fmadd(p, r, S::fset1(1.0f / 24.0f));
        p = S::fmadd(p, r, S::fset1(1.0f / 6.0f));
        p = S::fmadd(p, r, S::fset1(0.5f));
        p = S::fmadd(p, r, S::fset1(1.0f));
        p = S::fmadd(p, r, S::fset1(1.0f));
        const VI e = S::sll32_23(S::add32(S::cvt_round(n), S::set1_32(127)));
        return S::mul(p, S::castf(e));
    }

    static VF swiglu_v(VF g, VF u, const SwigluParams &prm) {
        if (prm.limit > 0.0f) {
            g = S::fmin(g, S::fset1(prm.limit));
            u = S::fmax(S::fmin(u, S::fset1(prm.limit)), S::fset1(-prm.limit));
        }
        const float k = prm.alpha > 0.0f ? -prm.alpha : -1.0f;
        const VF sig_den = S::add(exp_v(S::mul(g, S::fset1(k))), S::fset1(1.0f));
        const VF gated = S::div(g, sig_den);  // g * sigmoid(alpha * g); alpha = 1 is silu
        return S::mul(gated, prm.alpha > 0.0f ? S::add(u, S::fset1(1.0f)) : u);
    }

    static void swiglu_row(const float *g, const float *u, int64_t n, const SwigluParams &prm, float *h) {
        int64_t i = 0;
        for (; i + kW <= n; i += kW) S::storef(h + i, swiglu_v(S::loadf(g + i), S::loadf(u + i), prm));
        if (i < n) {
            alignas(64) float tg[kW] = {}, tu[kW] = {}, th[kW];
            std::memcpy(tg, g + i, sizeof(float) * static_cast<size_t>(n - i));
            std::memcpy(tu, u + i, sizeof(float) * static_cast<size_t>(n - i));
            S::storef(th, swiglu_v(S::loadf(tg), S::loadf(tu), prm));
            std::memcpy(h + i, th, sizeof(float) * static_cast<size_t>(n - i));
        }
    }

    static void axpy_row(float w, const float *x, int64_t n, float *y) {
        const VF vw = S::fset1(w);
        int64_t i = 0;
        for (; i + kW <= n; i += kW) S::storef(y + i, S::fmadd(vw, S::loadf(x + i), S::loadf(y + i)));
        if (i < n) {
            alignas(64) float tx[kW] = {}, ty[kW] = {};
            std::memcpy(tx, x + i, sizeof(float) * static_cast<size_t>(n - i));
            std::memcpy(ty, y + i, sizeof(float) * static_cast<size_t>(n - i));
            S::storef(ty, S::fmadd(vw, S::loadf(tx), S::loadf(ty)));
            std::memcpy(y + i, ty, sizeof(float) * static_cast<size_t>(n - i));
        }
    }

    static void merge_row(const float *const *src, int n_src, int64_t n, void *dst, bool dst_bf16, bool accumulate) {
        float *df = static_cast<float *>(dst);
        uint16_t *db = static_cast<uint16_t *>(dst);
        int64_t i = 0;
        for (; i + kW <= n; i += kW) {
            VF sum = S::loadf(src[0] + i);
            for (int j = 1; j < n_src; ++j) sum = S::add(sum, S::loadf(src[j] + i));
            const VF old = !accumulate ? S::fzero() : (dst_bf16 ? S::loadf_bf16(db + i) : S::loadf(df + i));
            const VF r = S::add(old, sum);
            if (dst_bf16)
                S::storef_bf16(db + i, r);
            else
                S::storef(df + i, r);
        }
        // Additions only: a scalar tail gives the same bits as a vector lane.
        for (; i < n; ++i) {
            float sum = src[0][i];
            for (int j = 1; j < n_src; ++j) sum += src[j][i];
            const float old = !accumulate ? 0.0f : (dst_bf16 ? bf16_to_f32(db[i]) : df[i]);
            if (dst_bf16)
                db[i] = f32_to_bf16(old + sum);
            else
                df[i] = old + sum;
        }
    }
};

}  // namespace kt::cpu::impl
