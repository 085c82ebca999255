// Weight conversion for the CPU kernels: from a source matrix (GGUF rows of any type kt reads, or caller buffers
// of F32 / F16 / BF16) to packed layouts (backends/cpu/packed.h), either kept in the source's own quantization or
// converted to kt's INT8 / INT4 / BF16.
//
// Slicing: any row range and any K range that starts on a block boundary of the source and of the target can be
// packed by itself; that is how NUMA shards are made at load time from the same source (the packed layout never
// depends on the node count). Conversions that compute scales (INT8 per output channel) use the whole row, so that
// every K slice of a row uses the same scale as the unsliced row.
#pragma once

#include <cstdint>

#include "backends/cpu/packed.h"
#include "core/status.h"
#include "mem/mapped_file.h"

namespace kt::moe {

// W [rows][cols] row-major as its source stores it; row r at data + r * row_bytes.
struct MatrixSource {
    int32_t type = KT_TYPE_F32;  // KT_TYPE_*
    const uint8_t *data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t row_bytes = 0;
    // When set, `data` lies in this read-only file mapping and nothing needs those pages resident once they are
    // packed: packing gives them back as it goes (MappedFile::drop_pages; a later read faults them in again), so a
    // model does not hold its packed copy and the file side by side.
    const mem::MappedFile *drop_after_packing = nullptr;
};

// Rows [r0, r1) of src as a source of their own (0 <= r0 <= r1 <= src.rows).
MatrixSource rows_of(const MatrixSource &src, int64_t r0, int64_t r1);

// Gives back the pages of rows [r0, r1) of a source marked drop_after_packing (else nothing); the bytes dropped.
uint64_t drop_packed_rows(const MatrixSource &src, int64_t r0, int64_t r1);

// Validates and describes a dense row-major matrix of `type` (cols must be a multiple of the type's block).
Status make_source(int32_t type, const void *data, int64_t rows, int64_t cols, MatrixSource *out);

enum class TargetFormat : int32_t {
    kAsSource = 0,  // keep the source's quantization (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K, IQ4_NL, IQ4_XS, MXFP4,
                    // BF16; the IQ1-IQ3 grid formats exactly as IQ_GRID3 or IQ_GRID); other types become Q8_0
                    // (quantized types) or BF16 (F32, F16)
    kInt8 = 1,      // int8 per output channel
    kInt4 = 2,      // int4 per group of 32, 64 or 128 along K
    kBf16 = 3,
};

struct PackSpec {
    cpu::PackedType type = cpu::PackedType::kInt8;
    int32_t group = 0;  // kInt4 only
};

// The packed type that keeps a GGUF type as it is; false when no kernel reads that type directly.
bool native_packed_type(int32_t gguf_type, cpu::PackedType *out);

// What `src` becomes under `target`.
Status pack_spec_for(const MatrixSource &src, TargetFormat target, int32_t int4_group, PackSpec *out);

// The bytes a [rows][cols] matrix of GGUF `type` takes packed whole under `target` (kt_packed_matrix_bytes): what
// a one-token GEMV over it reads. Needs no data: a layout depends on the type and shape alone.
Status packed_matrix_bytes(int32_t type, int64_t rows, int64_t cols, TargetFormat target, int32_t int4_group,
                           uint64_t *out);

// K granularity at which a matrix packed as `spec` from `src` may be cut into slices.
int64_t slice_k_granularity(const MatrixSource &src, const PackSpec &spec);

// Layout of rows [r0, r1) x columns [k0, k1) of src packed as spec. INVALID_ARGUMENT for a range that is empty,
// outside the matrix or not on a slice boundary.
Status slice_layout(const MatrixSource &src, const PackSpec &spec, int64_t r0, int64_t r1, int64_t k0, int64_t k1,
                    cpu::PackedLayout *out);

// Packs panels [p0, p1) of that slice into dst (layout.bytes, 64-byte aligned). Thread-safe; allocates row scratch.
Status pack_slice(const MatrixSource &src, const PackSpec &spec, int64_t r0, int64_t k0, const cpu::PackedLayout &layout,
                  int64_t p0, int64_t p1, uint8_t *dst);

// The INT8 / INT4 quantizers, stated once (tests reproduce them from this description):
//   INT8: s = amax(row) / 127, q = clamp(round_even(w / s), -127, 127) (s = 0: q = 0).
//   INT4: per group, s = amax(group) / 7, q = clamp(round_even(w / s), -8, 7).
//   Q8_0 (for GGUF types without a kernel): per 32, d = f16(amax / 127), q = clamp(round_even(w / d), -127, 127).
// A NaN weight, or one whose w / s is NaN (inf / inf), quantizes to 0; an infinite one to the end of the range.
float int8_row_scale(const float *w, int64_t n);
int8_t quantize_int8(float w, float scale);
float int4_group_scale(const float *w, int64_t n);
int8_t quantize_int4(float w, float scale);

}  // namespace kt::moe
