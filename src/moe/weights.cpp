#include "moe/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/pack.h"
#include "core/checked_math.h"
#include "core/fp16.h"
#include "ops/ref/blocks.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace kt::moe {

using cpu::PackedType;

// ------------------------------------------------------------------------------------------------------------
// Quantizers

float int8_row_scale(const float *w, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
    return amax / 127.0f;
}

namespace {

// round_even(w / scale) clamped to [lo, hi]. A weight that is not a number (a broken or hostile file) gives 0, as
// does inf / inf; an infinite one saturates. Converting NaN to an integer would be undefined.
int8_t quantize_clamped(float w, float scale, float lo, float hi) {
    if (!(scale > 0.0f)) return 0;
    const float q = std::nearbyint(w / scale);
    if (std::isnan(q)) return 0;
    return static_cast<int8_t>(std::clamp(q, lo, hi));
}

}  // namespace

int8_t quantize_int8(float w, float scale) { return quantize_clamped(w, scale, -127.0f, 127.0f); }

float int4_group_scale(const float *w, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
    return amax / 7.0f;
}

int8_t quantize_int4(float w, float scale) { return quantize_clamped(w, scale, -8.0f, 7.0f); }

// ------------------------------------------------------------------------------------------------------------
// Sources and specs

MatrixSource rows_of(const MatrixSource &src, int64_t r0, int64_t r1) {
    MatrixSource part = src;
    part.data = src.data + r0 * src.row_bytes;
    part.rows = r1 - r0;
    return part;
}

uint64_t drop_packed_rows(const MatrixSource &src, int64_t r0, int64_t r1) {
    if (!src.drop_after_packing || r1 <= r0) return 0;
    return src.drop_after_packing->drop_pages(src.data + r0 * src.row_bytes, static_cast<uint64_t>((r1 - r0) * src.row_bytes));
}

Status make_source(int32_t type, const void *data, int64_t rows, int64_t cols, MatrixSource *out) {
    const ops::TypeTraits *t = ops::type_traits(type);
    KT_RETURN_IF(!t || !ref::can_dequantize(type), KT_STATUS_UNSUPPORTED, "weights: type %d cannot be read", type);
    KT_RETURN_IF(data == nullptr, KT_STATUS_INVALID_ARGUMENT, "weights: data is NULL");
    KT_RETURN_IF(rows < 1 || cols < 1, KT_STATUS_INVALID_ARGUMENT, "weights: shape [%lld, %lld]",
                 static_cast<long long>(rows), static_cast<long long>(cols));
    KT_RETURN_IF(cols % t->block_size != 0, KT_STATUS_INVALID_ARGUMENT,
                 "weights: %s rows of %lld values are not a whole number of %lld-value blocks", t->name,
                 static_cast<long long>(cols), static_cast<long long>(t->block_size));
    MatrixSource s;
    KT_RETURN_IF(!ops::checked_row_bytes(*t, cols, &s.row_bytes), KT_STATUS_INVALID_ARGUMENT,
                 "weights: rows of %lld %s values are too large", static_cast<long long>(cols), t->name);
    s.type = type;
    s.data = static_cast<const uint8_t *>(data);
    s.rows = rows;
    s.cols = cols;
    *out = s;
    return Status::ok();
}

namespace {

// One grid-format block at p as integers (ops/ref): its 256 values, its scale codes (one per scale group) and its
// f16 d.
template <class Block, auto kDecode>
uint16_t decode_grid_block(const uint8_t *p, int8_t *values, uint8_t *codes) {
    Block block;
    std::memcpy(&block, p, sizeof block);
    if constexpr (std::is_same_v<Block, ref::BlockIq1M>) {
        return kDecode(&block, values, codes);  // its d is spread over the scale words
    } else {
        kDecode(&block, values, codes);
        return block.d;
    }
}

// The grid formats as IQ_GRID fields (packed.h). ops/ref decodes a block to integers, a signed grid value per weight
// and a scale code s per 16 or 32 weights, with w = d * unit * (2 s + 1) * value; the row's fields are the values'
// indices in the format's book, sc = 2 s + 1 per scale group (the packed group) and d * unit as an f32 (exact: unit
// is a power of two).
struct GridFormat {
    int32_t type;
    uint16_t (*decode_block)(const uint8_t *p, int8_t *values, uint8_t *codes);
    float unit;
    int scale_group;                  // weights per scale code: 16 or 32 (the packed matrix's group)
    int book_size;
    int8_t book[cpu::kCodebookSize];  // every value the decoder gives, ascending (index order; the rest unused)
};
constexpr GridFormat kGridFormats[] = {
    // IQ1: eighths, 8 g +- 1 for g = -1, 0, 1
    {KT_TYPE_IQ1_S, &decode_grid_block<ref::BlockIq1S, ref::iq1_s_values>, 0.125f, 32, 6, {-9, -7, -1, 1, 7, 9}},
    {KT_TYPE_IQ1_M, &decode_grid_block<ref::BlockIq1M, ref::iq1_m_values>, 0.125f, 16, 6, {-9, -7, -1, 1, 7, 9}},
    {KT_TYPE_IQ2_XXS, &decode_grid_block<ref::BlockIq2Xxs, ref::iq2_xxs_values>, 0.125f, 32, 6,
     {-43, -25, -8, 8, 25, 43}},
    {KT_TYPE_IQ2_XS, &decode_grid_block<ref::BlockIq2Xs, ref::iq2_xs_values>, 0.125f, 16, 6, {-43, -25, -8, 8, 25, 43}},
    {KT_TYPE_IQ2_S, &decode_grid_block<ref::BlockIq2S, ref::iq2_s_values>, 0.125f, 16, 6, {-43, -25, -8, 8, 25, 43}},
    {KT_TYPE_IQ3_XXS, &decode_grid_block<ref::BlockIq3Xxs, ref::iq3_xxs_values>, 0.25f, 32, 16,
     {-62, -52, -44, -36, -28, -20, -12, -4, 4, 12, 20, 28, 36, 44, 52, 62}},
    {KT_TYPE_IQ3_S, &decode_grid_block<ref::BlockIq3S, ref::iq3_s_values>, 1.0f, 32, 16,
     {-15, -13, -11, -9, -7, -5, -3, -1, 1, 3, 5, 7, 9, 11, 13, 15}},
};

// decode_grid_row finds a value's index as the number of book entries below it.
constexpr bool books_ascend() {
    for (const GridFormat &g : kGridFormats)
        for (int i = 1; i < g.book_size; ++i)
            if (g.book[i - 1] >= g.book[i]) return false;
    return true;
}
static_assert(books_ascend());

// The grid format `type`, or nullptr.
const GridFormat *grid_format(int32_t type) {
    for (const GridFormat &g : kGridFormats)
        if (g.type == type) return &g;
    return nullptr;
}

}  // namespace

bool native_packed_type(int32_t gguf_type, PackedType *out) {
    switch (gguf_type) {
        case KT_TYPE_Q4_0: *out = PackedType::kQ4_0; return true;
        case KT_TYPE_Q4_1: *out = PackedType::kQ4_1; return true;
        case KT_TYPE_Q5_0: *out = PackedType::kQ5_0; return true;
        case KT_TYPE_Q5_1: *out = PackedType::kQ5_1; return true;
        case KT_TYPE_IQ4_NL: *out = PackedType::kIq4Nl; return true;
        case KT_TYPE_Q8_0: *out = PackedType::kQ8_0; return true;
        case KT_TYPE_Q4_K: *out = PackedType::kQ4_K; return true;
        case KT_TYPE_Q5_K: *out = PackedType::kQ5_K; return true;
        case KT_TYPE_Q6_K: *out = PackedType::kQ6_K; return true;
        case KT_TYPE_Q2_K: *out = PackedType::kQ2_K; return true;
        case KT_TYPE_Q3_K: *out = PackedType::kQ3_K; return true;
        case KT_TYPE_IQ4_XS: *out = PackedType::kIq4Xs; return true;
        case KT_TYPE_MXFP4: *out = PackedType::kMxfp4; return true;
        case KT_TYPE_BF16: *out = PackedType::kBf16; return true;
        default:
            // The grid formats, as the code book indices of their grid values (decode_grid_row): in 3 bits where
            // the book has at most 8 values (the IQ1 and IQ2 formats), else 4.
            if (const GridFormat *grid = grid_format(gguf_type)) {
                *out = grid->book_size <= 8 ? PackedType::kIqGrid3 : PackedType::kIqGrid;
                return true;
            }
            return false;
    }
}

Status pack_spec_for(const MatrixSource &src, TargetFormat target, int32_t int4_group, PackSpec *out) {
    PackSpec spec;
    switch (target) {
        case TargetFormat::kAsSource:
            // Types without a kernel of their own become the closest one: float types BF16, quantized types
            // Q8_0 (8-bit codes with a scale per 32 values hold any <= 6-bit block format within 1/254 of a step).
            if (!native_packed_type(src.type, &spec.type))
                spec.type = (src.type == KT_TYPE_F32 || src.type == KT_TYPE_F16 || src.type == KT_TYPE_F64)
                                ? PackedType::kBf16
                                : PackedType::kQ8_0;
            if (spec.type == PackedType::kIqGrid || spec.type == PackedType::kIqGrid3)
                spec.group = grid_format(src.type)->scale_group;
            break;
        case TargetFormat::kInt8: spec.type = PackedType::kInt8; break;
        case TargetFormat::kInt4:
            KT_RETURN_IF(int4_group != 32 && int4_group != 64 && int4_group != 128, KT_STATUS_INVALID_ARGUMENT,
                         "weights: INT4 group size %d (must be 32, 64 or 128)", int4_group);
            spec.type = PackedType::kInt4;
            spec.group = int4_group;
            break;
        case TargetFormat::kBf16: spec.type = PackedType::kBf16; break;
        default: return Status::error(KT_STATUS_INVALID_ARGUMENT, "weights: unknown target format %d", static_cast<int>(target));
    }
    *out = spec;
    return Status::ok();
}

Status packed_matrix_bytes(int32_t type, int64_t rows, int64_t cols, TargetFormat target, int32_t int4_group,
                           uint64_t *out) {
    static const uint8_t kShapeOnly = 0;  // make_source wants data; nothing below reads it
    MatrixSource src;
    KT_TRY(make_source(type, &kShapeOnly, rows, cols, &src));
    PackSpec spec;
    KT_TRY(pack_spec_for(src, target, int4_group, &spec));
    cpu::PackedLayout layout;
    KT_TRY(slice_layout(src, spec, 0, rows, 0, cols, &layout));
    *out = static_cast<uint64_t>(layout.bytes);
    return Status::ok();
}

namespace {

bool converts(const MatrixSource &src, const PackSpec &spec) {
    PackedType native;
    return !(native_packed_type(src.type, &native) && native == spec.type && spec.type != PackedType::kInt8 &&
             spec.type != PackedType::kInt4);
}

bool superblock_type(PackedType t) { return cpu::packed_type_info(t).superblock > 0; }

}  // namespace

int64_t slice_k_granularity(const MatrixSource &src, const PackSpec &spec) {
    if (spec.type == PackedType::kInt4) return spec.group;
    if (spec.type == PackedType::kQ8_0) return 32;
    if (converts(src, spec)) return 1;                 // the row is decoded whole, then quantized per element
    if (superblock_type(spec.type)) return 128;        // a super-block may be cut in halves (superblock_k_offset)
    return ops::type_traits(src.type)->block_size;     // the 32-wide formats: 32; BF16: 1
}

Status slice_layout(const MatrixSource &src, const PackSpec &spec, int64_t r0, int64_t r1, int64_t k0, int64_t k1,
                    cpu::PackedLayout *out) {
    KT_RETURN_IF(r0 < 0 || r1 > src.rows || r0 >= r1 || k0 < 0 || k1 > src.cols || k0 >= k1,
                 KT_STATUS_INVALID_ARGUMENT, "weights: slice rows [%lld, %lld) cols [%lld, %lld) of a [%lld, %lld] matrix",
                 static_cast<long long>(r0), static_cast<long long>(r1), static_cast<long long>(k0),
                 static_cast<long long>(k1), static_cast<long long>(src.rows), static_cast<long long>(src.cols));
    const int64_t gran = slice_k_granularity(src, spec);
    KT_RETURN_IF(k0 % gran != 0 || (k1 != src.cols && k1 % gran != 0), KT_STATUS_INVALID_ARGUMENT,
                 "weights: slice cols [%lld, %lld) are not on %lld-column boundaries", static_cast<long long>(k0),
                 static_cast<long long>(k1), static_cast<long long>(gran));
    const int32_t offset = superblock_type(spec.type) ? static_cast<int32_t>(k0 % 256) : 0;
    return cpu::packed_layout(spec.type, r1 - r0, k1 - k0, spec.group, offset, out);
}

// ------------------------------------------------------------------------------------------------------------
// Row decoding: one source row into the packer's fields, for the whole row (slices point into it).

namespace {

struct RowScratch {
    std::vector<float> f32;
    std::vector<uint8_t> codes;
    std::vector<uint16_t> bf16;
    std::vector<float> f32_scale;
    std::vector<uint16_t> f16_group, f16_group2, f16_super, f16_super2;
    std::vector<uint8_t> u8_group, u8_group2;
    std::vector<int8_t> i8_group;
};

void decode_grid_row(int32_t type, const uint8_t *p, int64_t nsb, RowScratch *s, cpu::RowFields *f) {
    const GridFormat *fmt = grid_format(type);  // not null: native_packed_type made the row IQ_GRID
    const int groups = ref::kQKK / fmt->scale_group;  // per super-block
    const int64_t block_bytes = ops::type_traits(type)->block_bytes;
    s->codes.resize(static_cast<size_t>(nsb * ref::kQKK));
    s->i8_group.resize(static_cast<size_t>(nsb * groups));
    s->f32_scale.resize(static_cast<size_t>(nsb));
    int8_t values[ref::kQKK];
    uint8_t codes[ref::kQKK / 16];
    for (int64_t b = 0; b < nsb; ++b) {
        const uint16_t d = fmt->decode_block(p + b * block_bytes, values, codes);
        s->f32_scale[static_cast<size_t>(b)] = fp16_to_f32(d) * fmt->unit;
        int8_t *sc = s->i8_group.data() + b * groups;
        for (int g = 0; g < groups; ++g) sc[g] = static_cast<int8_t>(2 * codes[g] + 1);
        // A value's index: the count of book entries below it (the books ascend), as compares the compiler
        // vectorizes; a byte-by-byte table lookup here was a fifth of an IQ2_XXS load.
        uint8_t *c = s->codes.data() + b * ref::kQKK;
        std::memset(c, 0, ref::kQKK);
        for (int j = 0; j < fmt->book_size; ++j) {
            const int8_t entry = fmt->book[j];
            for (int i = 0; i < ref::kQKK; ++i) c[i] = static_cast<uint8_t>(c[i] + (values[i] > entry ? 1 : 0));
        }
    }
    f->codes = s->codes.data();
    f->i8_group = s->i8_group.data();
    f->f32_scale = s->f32_scale.data();
    f->codebook = fmt->book;
}

// Fills the whole-row fields for `row` of src as spec.type; *fields points at element/group/super-block 0.
void decode_row(const MatrixSource &src, const PackSpec &spec, int64_t row, RowScratch *s, cpu::RowFields *f) {
    const int64_t n = src.cols;
    const uint8_t *p = src.data + row * src.row_bytes;
    *f = cpu::RowFields();
    if (converts(src, spec)) {
        s->f32.resize(static_cast<size_t>(n));
        ref::dequantize_row(src.type, p, s->f32.data(), n);
        const float *w = s->f32.data();
        switch (spec.type) {
            case PackedType::kInt8: {
                s->codes.resize(static_cast<size_t>(n));
                s->f32_scale.assign(1, int8_row_scale(w, n));
                for (int64_t i = 0; i < n; ++i) s->codes[static_cast<size_t>(i)] = static_cast<uint8_t>(quantize_int8(w[i], s->f32_scale[0]));
                f->codes = s->codes.data();
                f->f32_scale = s->f32_scale.data();
                return;
            }
            case PackedType::kInt4: {
                const int64_t g = spec.group, groups = (n + g - 1) / g;
                s->codes.resize(static_cast<size_t>(n));
                s->f32_scale.resize(static_cast<size_t>(groups));
                for (int64_t j = 0; j < groups; ++j) {
                    const int64_t b = j * g, len = std::min(g, n - b);
                    const float sc = int4_group_scale(w + b, len);
                    s->f32_scale[static_cast<size_t>(j)] = sc;
                    for (int64_t i = b; i < b + len; ++i) s->codes[static_cast<size_t>(i)] = static_cast<uint8_t>(quantize_int4(w[i], sc));
                }
                f->codes = s->codes.data();
                f->f32_scale = s->f32_scale.data();
                return;
            }
            case PackedType::kQ8_0: {  // GGUF Q8_0 blocks: d = amax / 127 rounded to f16, q = round(w / d)
                const int64_t nb = n / ref::kQK;
                s->codes.resize(static_cast<size_t>(n));
                s->f16_group.resize(static_cast<size_t>(nb));
                for (int64_t b = 0; b < nb; ++b) {
                    const uint16_t d16 = f32_to_fp16(int8_row_scale(w + b * ref::kQK, ref::kQK));
                    s->f16_group[static_cast<size_t>(b)] = d16;
                    const float d = fp16_to_f32(d16);
                    for (int64_t i = b * ref::kQK; i < (b + 1) * ref::kQK; ++i)
                        s->codes[static_cast<size_t>(i)] = static_cast<uint8_t>(quantize_int8(w[i], d));
                }
                f->codes = s->codes.data();
                f->f16_group = s->f16_group.data();
                return;
            }
            default: {  // kBf16 from any other type
                s->bf16.resize(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i) s->bf16[static_cast<size_t>(i)] = f32_to_bf16(w[i]);
                f->bf16 = s->bf16.data();
                return;
            }
        }
    }

    // Kept as stored: GGUF blocks to codes and scale fields.
    switch (spec.type) {
        case PackedType::kBf16: f->bf16 = reinterpret_cast<const uint16_t *>(p); return;  // may be unaligned: see below
        case PackedType::kQ8_0: {
            const int64_t nb = n / ref::kQK;
            s->codes.resize(static_cast<size_t>(n));
            s->f16_group.resize(static_cast<size_t>(nb));
            for (int64_t b = 0; b < nb; ++b) {
                ref::BlockQ8_0 blk;
                std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
                s->f16_group[static_cast<size_t>(b)] = blk.d;
                std::memcpy(s->codes.data() + b * ref::kQK, blk.qs, ref::kQK);
            }
            f->codes = s->codes.data();
            f->f16_group = s->f16_group.data();
            return;
        }
        case PackedType::kQ4_0:
        case PackedType::kQ4_1:
        case PackedType::kQ5_0:
        case PackedType::kQ5_1:
        case PackedType::kIq4Nl: {
            // The 32-wide nibble formats (ops/ref/blocks.h): f16 d; f16 m (Q4_1, Q5_1); the fifth bits of the 32
            // codes as a little-endian word (Q5_0, Q5_1); 16 bytes whose low nibbles are codes 0..15 and high
            // nibbles codes 16..31.
            const cpu::PackedTypeInfo &info = cpu::packed_type_info(spec.type);
            const bool has_m = info.has_mins, has_qh = info.hbits_per_tile > 0;
            const int64_t nb = n / ref::kQK, block_bytes = ops::type_traits(src.type)->block_bytes;
            s->codes.resize(static_cast<size_t>(n));
            s->f16_group.resize(static_cast<size_t>(nb));
            if (has_m) s->f16_group2.resize(static_cast<size_t>(nb));
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *blk = p + b * block_bytes, *qs = blk + block_bytes - ref::kQK / 2;
                std::memcpy(&s->f16_group[static_cast<size_t>(b)], blk, 2);
                if (has_m) std::memcpy(&s->f16_group2[static_cast<size_t>(b)], blk + 2, 2);
                uint32_t qh = 0;
                if (has_qh) std::memcpy(&qh, blk + (has_m ? 4 : 2), 4);
                uint8_t *c = s->codes.data() + b * ref::kQK;
                for (int j = 0; j < ref::kQK / 2; ++j) {
                    c[j] = static_cast<uint8_t>((qs[j] & 0x0F) | ((qh >> j) & 1) << 4);
                    c[j + ref::kQK / 2] = static_cast<uint8_t>((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
                }
            }
            f->codes = s->codes.data();
            f->f16_group = s->f16_group.data();
            if (has_m) f->f16_group2 = s->f16_group2.data();
            return;
        }
        case PackedType::kMxfp4: {
            const int64_t nb = n / ref::kQK;
            s->codes.resize(static_cast<size_t>(n));
            s->u8_group.resize(static_cast<size_t>(nb));
            for (int64_t b = 0; b < nb; ++b) {
                ref::BlockMxfp4 blk;
                std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
                s->u8_group[static_cast<size_t>(b)] = blk.e;
                uint8_t *c = s->codes.data() + b * ref::kQK;
                for (int j = 0; j < ref::kQK / 2; ++j) {
                    c[j] = blk.qs[j] & 0x0F;
                    c[j + ref::kQK / 2] = blk.qs[j] >> 4;
                }
            }
            f->codes = s->codes.data();
            f->u8_group = s->u8_group.data();
            return;
        }
        default: break;
    }

    // Super-block formats.
    const int64_t nsb = n / ref::kQKK;
    if (spec.type == PackedType::kIqGrid || spec.type == PackedType::kIqGrid3)
        return decode_grid_row(src.type, p, nsb, s, f);
    s->codes.resize(static_cast<size_t>(n));
    s->f16_super.resize(static_cast<size_t>(nsb));
    uint8_t *codes = s->codes.data();
    switch (spec.type) {
        case PackedType::kQ4_K:
        case PackedType::kQ5_K: {
            s->f16_super2.resize(static_cast<size_t>(nsb));
            s->u8_group.resize(static_cast<size_t>(nsb * 8));
            s->u8_group2.resize(static_cast<size_t>(nsb * 8));
            for (int64_t b = 0; b < nsb; ++b) {
                const uint8_t *qs, *scales, *qh = nullptr;
                uint16_t d, dmin;
                ref::BlockQ4_K b4;
                ref::BlockQ5_K b5;
                if (spec.type == PackedType::kQ4_K) {
                    std::memcpy(&b4, p + b * sizeof b4, sizeof b4);
                    qs = b4.qs, scales = b4.scales, d = b4.d, dmin = b4.dmin;
                } else {
                    std::memcpy(&b5, p + b * sizeof b5, sizeof b5);
                    qs = b5.qs, scales = b5.scales, qh = b5.qh, d = b5.d, dmin = b5.dmin;
                }
                s->f16_super[static_cast<size_t>(b)] = d;
                s->f16_super2[static_cast<size_t>(b)] = dmin;
                for (int j = 0; j < 8; ++j)
                    ref::unpack_k4_scale_min(j, scales, &s->u8_group[static_cast<size_t>(b * 8 + j)],
                                             &s->u8_group2[static_cast<size_t>(b * 8 + j)]);
                uint8_t *c = codes + b * ref::kQKK;
                for (int chunk = 0; chunk < 4; ++chunk) {
                    for (int l = 0; l < 32; ++l) {
                        const uint8_t q = qs[32 * chunk + l];
                        uint8_t lo = q & 0x0F, hi = q >> 4;
                        if (qh) {
                            lo = static_cast<uint8_t>(lo | (((qh[l] >> (2 * chunk)) & 1) << 4));
                            hi = static_cast<uint8_t>(hi | (((qh[l] >> (2 * chunk + 1)) & 1) << 4));
                        }
                        c[64 * chunk + l] = lo;
                        c[64 * chunk + 32 + l] = hi;
                    }
                }
            }
            f->u8_group = s->u8_group.data();
            f->u8_group2 = s->u8_group2.data();
            f->f16_super2 = s->f16_super2.data();
            break;
        }
        case PackedType::kQ6_K: {
            s->i8_group.resize(static_cast<size_t>(nsb * 16));
            for (int64_t b = 0; b < nsb; ++b) {
                ref::BlockQ6_K blk;
                std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
                s->f16_super[static_cast<size_t>(b)] = blk.d;
                std::memcpy(s->i8_group.data() + b * 16, blk.scales, 16);
                uint8_t *c = codes + b * ref::kQKK;
                for (int half = 0; half < 2; ++half) {
                    const uint8_t *ql = blk.ql + 64 * half, *qh = blk.qh + 32 * half;
                    uint8_t *y = c + 128 * half;
                    for (int l = 0; l < 32; ++l) {
                        y[l] = static_cast<uint8_t>((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4));
                        y[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
                        y[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                        y[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                    }
                }
            }
            f->i8_group = s->i8_group.data();
            break;
        }
        case PackedType::kQ2_K:
        case PackedType::kQ3_K: {
            // Both store 2-bit planes: in each half of 128 values, plane `shift` of 32 bytes holds values
            // 32 * (shift / 2) + 0..31 of the half, the first 16 bytes one scale group, the next 16 the next
            // (ops/ref/dequantize_ref.cpp walks them the same way). Q3_K's third bit is hmask bit (4 * half +
            // shift / 2) of byte l (the value's place in its plane), set for the upper four codes.
            const bool q2 = spec.type == PackedType::kQ2_K;
            if (q2) {
                s->f16_super2.resize(static_cast<size_t>(nsb));
                s->u8_group.resize(static_cast<size_t>(nsb * 16));
            } else {
                s->i8_group.resize(static_cast<size_t>(nsb * 16));
            }
            for (int64_t b = 0; b < nsb; ++b) {
                ref::BlockQ2_K b2;
                ref::BlockQ3_K b3;
                const uint8_t *qs, *hmask = nullptr;
                if (q2) {
                    std::memcpy(&b2, p + b * sizeof b2, sizeof b2);
                    qs = b2.qs;
                    s->f16_super[static_cast<size_t>(b)] = b2.d;
                    s->f16_super2[static_cast<size_t>(b)] = b2.dmin;
                    std::memcpy(s->u8_group.data() + b * 16, b2.scales, 16);  // scale | min << 4, as packed.h keeps it
                } else {
                    std::memcpy(&b3, p + b * sizeof b3, sizeof b3);
                    qs = b3.qs;
                    hmask = b3.hmask;
                    s->f16_super[static_cast<size_t>(b)] = b3.d;
                    int scales[16];
                    ref::unpack_q3_k_scales(b3.scales, scales);
                    for (int g = 0; g < 16; ++g)
                        s->i8_group[static_cast<size_t>(b * 16 + g)] = static_cast<int8_t>(scales[g] - 32);
                }
                uint8_t *c = codes + b * ref::kQKK;
                for (int half = 0; half < 2; ++half)
                    for (int shift = 0; shift < 8; shift += 2)
                        for (int l = 0; l < 32; ++l) {
                            int q = (qs[32 * half + l] >> shift) & 3;
                            if (hmask && (hmask[l] >> (4 * half + shift / 2)) & 1) q |= 4;
                            c[128 * half + 16 * shift + l] = static_cast<uint8_t>(q);
                        }
            }
            if (q2) {
                f->u8_group = s->u8_group.data();
                f->f16_super2 = s->f16_super2.data();
            } else {
                f->i8_group = s->i8_group.data();
            }
            break;
        }
        case PackedType::kIq4Xs: {
            s->i8_group.resize(static_cast<size_t>(nsb * 8));
            for (int64_t b = 0; b < nsb; ++b) {
                ref::BlockIq4Xs blk;
                std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
                s->f16_super[static_cast<size_t>(b)] = blk.d;
                uint8_t *c = codes + b * ref::kQKK;
                for (int ib = 0; ib < 8; ++ib) {
                    const int ls = ((blk.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((blk.scales_h >> (2 * ib)) & 3) << 4);
                    s->i8_group[static_cast<size_t>(b * 8 + ib)] = static_cast<int8_t>(ls - 32);
                    for (int j = 0; j < 16; ++j) {
                        c[32 * ib + j] = blk.qs[16 * ib + j] & 0x0F;
                        c[32 * ib + 16 + j] = blk.qs[16 * ib + j] >> 4;
                    }
                }
            }
            f->i8_group = s->i8_group.data();
            break;
        }
        default: break;
    }
    f->codes = codes;
    f->f16_super = s->f16_super.data();
}

}  // namespace

Status pack_slice(const MatrixSource &src, const PackSpec &spec, int64_t r0, int64_t k0, const cpu::PackedLayout &layout,
                  int64_t p0, int64_t p1, uint8_t *dst) {
    KT_RETURN_IF(p0 < 0 || p1 > layout.panels || p0 > p1, KT_STATUS_INVALID_ARGUMENT, "pack: panels [%lld, %lld) of %lld",
                 static_cast<long long>(p0), static_cast<long long>(p1), static_cast<long long>(layout.panels));
    RowScratch scratch;
    std::vector<uint16_t> bf16_copy;
    const cpu::PackedTypeInfo &info = cpu::packed_type_info(spec.type);
    const int64_t group = layout.group > 0 ? layout.group : 1;
    cpu::pack_panels(layout, p0, p1, [&](int64_t row, cpu::RowFields *out) {
        cpu::RowFields whole;
        decode_row(src, spec, r0 + row, &scratch, &whole);
        cpu::RowFields f = whole;
        if (f.codes) f.codes += k0;
        if (f.bf16) {
            // GGUF BF16 rows may sit at any even address: copy the slice (the packer reads it element by element).
            bf16_copy.resize(static_cast<size_t>(layout.k));
            std::memcpy(bf16_copy.data(), reinterpret_cast<const uint8_t *>(whole.bf16) + 2 * k0,
                        sizeof(uint16_t) * static_cast<size_t>(layout.k));
            f.bf16 = bf16_copy.data();
        }
        if (spec.type == PackedType::kInt4) f.f32_scale += k0 / group;
        if (f.f16_group) f.f16_group += k0 / group;
        if (f.f16_group2) f.f16_group2 += k0 / group;
        if (f.u8_group) f.u8_group += k0 / group;
        if (f.u8_group2) f.u8_group2 += k0 / group;
        if (f.i8_group) f.i8_group += k0 / group;
        if (info.superblock > 0) {
            if (f.f16_super) f.f16_super += k0 / 256;
            if (f.f16_super2) f.f16_super2 += k0 / 256;
            if (f.f32_scale) f.f32_scale += k0 / 256;  // IQ_GRID's d
        }
        *out = f;
    }, dst);
    return Status::ok();
}

}  // namespace kt::moe
