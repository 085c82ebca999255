// The CUDA side of the device interface (src/device): BF16 expert weights on a GPU and the grouped expert FFN.
// No CUDA header here, so every translation unit can use it; without CUDA, cuda_backend_none.cpp implements it
// by saying so.
//
// One ExpertEngine per GPU: one stream, one cuBLAS handle, one work buffer and pinned host staging, shared by the
// layers that run on it (one call at a time, in order). A call:
//   host:   x [T][H] f32 and the row plan (row_token, row_weight, token_begin, token_rows) into pinned staging
//   stream: H2D copies; gather x rows into xg bf16 [R][H]; per expert with rows: cublasGemmEx gate|up
//           gu[R_e][2I] = xg_e · W_gu[e]ᵀ (BF16 in, f32 out and compute); SwiGLU kernel h = bf16(silu(g) · u);
//           per expert: y[R_e][H] = h_e · W_down[e]ᵀ; combine kernel out[t] = Σ rows of t in slot order w · y[row]
//           (no atomics: deterministic); D2H copy of out; an event
//   wait:   the event, then out from pinned staging to the caller's buffer
//
// Uploads run on a stream of their own, through two fixed staging slots (pinned host memory, and device memory
// counted in the device's work buffer, src/device/device.h): while the GPU copies and converts one slot, the host
// fills the other. They never wait for the compute stream, so an upload (a layer streamed in for a long prompt, a
// re-placement) goes on while calls already submitted compute.
#pragma once

#include <cstdint>
#include <memory>

#include "core/function_ref.h"
#include "core/status.h"

namespace kt::cuda {

struct ExpertCall {
    int64_t n_tokens = 0, hidden = 0, intermediate = 0, n_experts = 0;
    const float *input = nullptr;         // host [n_tokens][H]
    const int32_t *expert_begin = nullptr;  // host [n_experts + 1]
    const int32_t *row_token = nullptr;   // host [rows]
    const float *row_weight = nullptr;    // host [rows]
    const int32_t *token_begin = nullptr; // host [n_tokens + 1]
    const int32_t *token_rows = nullptr;  // host [rows]
    const void *const *gate_up = nullptr; // [n_experts] device bf16 [2I][H] (null: not resident)
    const void *const *down = nullptr;    // [n_experts] device bf16 [H][I]
    float *output = nullptr;              // host [n_tokens][H], written by wait()
};

class ExpertEngine {
public:
    // Binds to CUDA device `device`: creates the streams, events and cuBLAS handle, and the two upload slots of
    // upload_slot_bytes each in pinned host memory (their device halves come with the first reserve()).
    static Status create(int device, uint64_t upload_slot_bytes, std::unique_ptr<ExpertEngine> *out);
    virtual ~ExpertEngine() = default;

    // Grows the work buffer and pinned staging to hold calls of up to max_tokens tokens and max_rows rows (the
    // first call also allocates the upload slots' device memory).
    virtual Status reserve(int64_t max_tokens, int64_t max_rows, int64_t hidden, int64_t intermediate) = 0;
    // Device memory of `bytes`; freed by free_device.
    virtual Status alloc_device(uint64_t bytes, void **out) = 0;
    virtual void free_device(void *ptr) = 0;
    // Copies rows x cols of `type` (KT_TYPE_F32, F16, BF16, Q8_0, Q4_0; rows row_bytes apart) to the device and
    // converts them there to bf16 at dst (row-major, cols per row). Returns once dst holds them (or the failure).
    virtual Status upload_bf16(int32_t type, const void *src, int64_t rows, int64_t cols, int64_t row_bytes, void *dst) = 0;
    // The same for rows of any other type, converted on the host: row_to_bf16(r, out) writes row r's cols bf16
    // values (uint16_t bit patterns) to out, straight into pinned staging.
    virtual Status upload_rows_bf16(int64_t rows, int64_t cols, FunctionRef<void(int64_t, uint16_t *)> row_to_bf16,
                                    void *dst) = 0;

    virtual Status submit(const ExpertCall &call, uint64_t *ticket) = 0;
    // Waits for `ticket`, writes its output; *begin_ns (submission, monotonic clock) and *end_ns (begin plus the
    // stream's elapsed time between the call's first and last event).
    virtual Status wait(uint64_t ticket, int64_t *begin_ns, int64_t *end_ns) = 0;
};

}  // namespace kt::cuda
