// Devices: where the experts of a MoE layer that are not on kt's CPU engine are computed.
//
// A Device owns memory it accounts for exactly (bytes used <= its budget, always) and runs work asynchronously, in
// submission order. A DeviceLayer is one MoE layer's share of it: the experts uploaded to it (gate, up and down as
// BF16, copied out of the host's weights into memory the device owns) and one call's work:
//
//   out_dev[T, H] = Σ over (t, j) with resident(ids[t, j]):  weights[t, j] · down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t]))
//
// computed as a GPU computes it: x rounded to BF16, gate/up products accumulated in f32, SwiGLU in f32, h rounded to
// BF16, down products in f32, and each token's rows added in slot order. submit() returns an Event; wait(event)
// blocks until the result is in the caller's output buffer and reports when the device worked on it.
//
// Two implementations:
//   kCpuStandIn  runs the device work on its own thread (not the expert pool's), on its own copies of inputs and
//                outputs (host -> "device" -> host), so placement and scheduling are exercised for real without a GPU.
//   kCuda        weights dequantized to BF16 on the GPU, cuBLAS BF16 GEMMs for gate|up and down grouped per expert,
//                a SwiGLU kernel, one stream, events, pinned host staging (src/backends/cuda/cuda_experts.h).
//
// The layers of one device share one work buffer (their calls run one after another on the device's queue), sized
// for the largest layer: workspace_bytes() says exactly how large, and the placement planner counts it as the part
// of the budget that is not experts.
//
// Thread safety: a Device may be used from any thread; a DeviceLayer's submit/wait come from one thread at a time
// (the forward pass running the layer), upload() before the first submit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "ops/linear.h"

namespace kt::device {

enum class Kind : int32_t { kNone = 0, kCpuStandIn = 1, kCuda = 2 };  // values = KT_DEVICE_*
const char *kind_name(Kind kind);

// One MoE layer as a device holds it.
struct LayerShape {
    int64_t n_experts = 0;
    int64_t hidden = 0;        // H
    int64_t intermediate = 0;  // I
    int64_t max_tokens = 0;    // T per call
    int32_t max_top_k = 0;     // k per call
};

// The smallest shape that covers both (each field the larger): what a work buffer shared by layers is sized for.
LayerShape cover(const LayerShape &a, const LayerShape &b);

// Exact device bytes of one resident expert: gate, up [I][H] and down [H][I] in BF16.
uint64_t expert_bytes(int64_t hidden, int64_t intermediate);
// Each of the two staging slots that uploads pass through on the device (the stored rows, before conversion).
// Fixed, so that uploading a matrix of any size costs no device memory beyond the budget.
constexpr uint64_t kUploadSlotBytes = 4ull << 20;
// Exact device bytes of the work buffer for calls of `shape`, the upload slots included (see device.cpp).
uint64_t workspace_bytes(const LayerShape &shape);

// One call's work. Buffers are the caller's: input/ids/weights are copied by submit(); output must stay valid
// until wait() returns. Every id is < n_experts or negative (skipped); ids of experts not resident are skipped.
struct ExpertWork {
    int64_t n_tokens = 0;
    int32_t top_k = 0;
    const float *input = nullptr;    // [n_tokens][H]
    const int32_t *ids = nullptr;    // [n_tokens][top_k]
    const float *weights = nullptr;  // [n_tokens][top_k]
    float *output = nullptr;         // [n_tokens][H], overwritten (zeros for a token with no resident expert)
};

struct Event {
    uint64_t ticket = 0;  // 0: nothing was submitted
};

// When the device worked on a call, on the monotonic_ns clock (core/thread_pool.h): from the start of its
// host-to-device copies to the end of its device-to-host copy.
struct Interval {
    int64_t begin_ns = 0, end_ns = 0;
    int64_t ns() const { return end_ns > begin_ns ? end_ns - begin_ns : 0; }
};

// The rows of one call that a device computes, grouped by expert (a grouped GEMM per expert) and listed per token
// (the weighted sum of a token's rows in slot order). Built on the host from ids and the resident mask.
struct RowPlan {
    std::vector<int32_t> expert_begin;  // [n_experts + 1]: rows of expert e are [expert_begin[e], expert_begin[e+1])
    std::vector<int32_t> row_token;     // [rows] token of each row
    std::vector<float> row_weight;      // [rows]
    std::vector<int32_t> token_begin;   // [n_tokens + 1]: CSR over token_rows
    std::vector<int32_t> token_rows;    // [rows] rows of token t in slot order
    int64_t rows() const { return static_cast<int64_t>(row_token.size()); }
};
// Fills *plan for `work`: rows grouped by expert (ascending), tokens ascending within an expert. Allocates only
// when the plan grows.
void plan_rows(const ExpertWork &work, const std::vector<uint8_t> &resident, int64_t n_experts, RowPlan *plan);

class Device;

class DeviceLayer {
public:
    virtual ~DeviceLayer() = default;
    const LayerShape &shape() const { return shape_; }
    // Copies expert e's matrices (one expert each: gate, up [I rows of H], down [H rows of I], any type
    // ops/ref can dequantize) into device memory as BF16. Counted against the device's budget; an expert uploaded
    // twice is replaced in place, so, as for evict(), no work of this layer may be in flight (other layers' calls
    // may: uploads do not wait for them).
    virtual Status upload(int64_t expert, const ops::MatrixView &gate, const ops::MatrixView &up,
                          const ops::MatrixView &down) = 0;
    // Takes expert e off the device and gives its memory back (nothing when it is not resident). Only between
    // calls: no work of this layer may be in flight.
    virtual Status evict(int64_t expert) = 0;
    // Queues the work; returns once the inputs are copied. *event identifies it for wait().
    virtual Status submit(const ExpertWork &work, Event *event) = 0;
    // Blocks until the work of `event` (and all before it) is done and its output written; *when (may be null)
    // receives the device's interval. The work's failure, if any, is returned here.
    virtual Status wait(const Event &event, Interval *when) = 0;

    bool resident(int64_t e) const { return e >= 0 && e < shape_.n_experts && resident_[static_cast<size_t>(e)]; }
    const std::vector<uint8_t> &resident_mask() const { return resident_; }  // [n_experts]
    int64_t n_resident() const { return n_resident_; }
    uint64_t bytes() const { return static_cast<uint64_t>(n_resident_) * expert_bytes(shape_.hidden, shape_.intermediate); }

protected:
    explicit DeviceLayer(const LayerShape &shape) : shape_(shape), resident_(static_cast<size_t>(shape.n_experts), 0) {}
    Status check_upload(int64_t expert, const ops::MatrixView &gate, const ops::MatrixView &up,
                        const ops::MatrixView &down) const;
    Status check_work(const ExpertWork &work) const;
    void mark_resident(int64_t e) {
        if (!resident_[static_cast<size_t>(e)]) ++n_resident_;
        resident_[static_cast<size_t>(e)] = 1;
    }
    void unmark_resident(int64_t e) {
        if (resident_[static_cast<size_t>(e)]) --n_resident_;
        resident_[static_cast<size_t>(e)] = 0;
    }

    LayerShape shape_;
    std::vector<uint8_t> resident_;
    int64_t n_resident_ = 0;
};

struct DeviceOptions {
    Kind kind = Kind::kNone;
    uint64_t budget_bytes = 0;  // device memory this device may use (0: none, every upload fails)
    int32_t index = 0;          // kCuda: the CUDA device ordinal
    // kCpuStandIn, tests only: called on the device's thread as each call's work begins (after its begin time is
    // taken), so a test can hold the device until the CPU side has started.
    std::function<void()> on_work_begin;
};

class Device {
public:
    virtual ~Device() = default;
    Kind kind() const { return options_.kind; }
    virtual std::string name() const = 0;
    uint64_t budget_bytes() const { return options_.budget_bytes; }
    uint64_t used_bytes() const;
    // A layer on this device; grows the shared workspace to cover `shape` (counted against the budget).
    virtual Status create_layer(const LayerShape &shape, std::unique_ptr<DeviceLayer> *out) = 0;

protected:
    explicit Device(DeviceOptions options) : options_(std::move(options)) {}
    // Accounting: every byte of device memory is reserved here before it is allocated, released after it is freed.
    Status reserve(uint64_t bytes, const char *what);
    void release(uint64_t bytes);

    DeviceOptions options_;
    mutable std::mutex accounting_mutex_;
    uint64_t used_ = 0;
};

// A device of options.kind. kCuda without a CUDA build or device: UNSUPPORTED, saying which.
Status create_device(const DeviceOptions &options, std::shared_ptr<Device> *out);

// The device work computed on the calling thread, as the stand-in computes it (the stand-in calls this), from
// BF16 weights per expert (null where not resident): gate_up[e] [2I][H] (gate rows then up rows), down[e] [H][I].
// input: [n_tokens][H] f32; output: [n_tokens][H], overwritten.
void compute_rows_bf16(const LayerShape &shape, int64_t n_tokens, const float *input, const RowPlan &plan,
                       const uint16_t *const *gate_up, const uint16_t *const *down, float *output);

// The internal creators behind create_device (standin_device.cpp, cuda_device.cpp).
Status create_standin_device(const DeviceOptions &options, std::shared_ptr<Device> *out);
Status create_cuda_device(const DeviceOptions &options, std::shared_ptr<Device> *out);

}  // namespace kt::device
