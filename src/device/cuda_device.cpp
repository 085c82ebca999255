// The CUDA device: the device interface over backends/cuda's ExpertEngine. Weights of the types the GPU
// dequantizes itself (F32, F16, BF16, Q8_0, Q4_0) are copied as stored and converted to BF16 on the GPU; other
// types are dequantized on the host (ops/ref) and rounded to BF16 row by row into the upload's pinned staging.
// Memory is accounted here before each allocation (the upload slots as part of the work buffer).
#include <vector>

#include "backends/cuda/cuda_experts.h"
#include "core/fp16.h"
#include "device/device.h"
#include "ops/ref/quants_ref.h"

namespace kt::device {
namespace {

bool gpu_converts(int32_t type) {
    return type == KT_TYPE_F32 || type == KT_TYPE_F16 || type == KT_TYPE_BF16 || type == KT_TYPE_Q8_0 ||
           type == KT_TYPE_Q4_0;
}

class CudaDevice;

class CudaLayer final : public DeviceLayer {
public:
    CudaLayer(CudaDevice &device, const LayerShape &shape)
        : DeviceLayer(shape), device_(device), gate_up_(static_cast<size_t>(shape.n_experts), nullptr),
          down_(static_cast<size_t>(shape.n_experts), nullptr) {}
    ~CudaLayer() override;

    Status upload(int64_t expert, const ops::MatrixView &gate, const ops::MatrixView &up,
                  const ops::MatrixView &down) override;
    Status evict(int64_t expert) override;
    Status submit(const ExpertWork &work, Event *event) override;
    Status wait(const Event &event, Interval *when) override;

private:
    Status upload_matrix(const ops::MatrixView &m, void *dst);

    CudaDevice &device_;
    std::vector<void *> gate_up_, down_;  // device bf16, per expert
    RowPlan plan_;
};

class CudaDevice final : public Device {
public:
    CudaDevice(const DeviceOptions &options, std::unique_ptr<cuda::ExpertEngine> engine)
        : Device(options), engine_(std::move(engine)) {}
    ~CudaDevice() override {
        engine_.reset();
        release(workspace_reserved_);
    }

    std::string name() const override { return "cuda:" + std::to_string(options_.index); }

    Status create_layer(const LayerShape &shape, std::unique_ptr<DeviceLayer> *out) override {
        KT_RETURN_IF(shape.n_experts <= 0 || shape.hidden <= 0 || shape.intermediate <= 0 || shape.max_tokens <= 0 ||
                         shape.max_top_k <= 0,
                     KT_STATUS_INVALID_ARGUMENT, "device: bad layer shape");
        // The engine's work buffer is sized for the largest layer so far; the accounting follows the same rule.
        const LayerShape grown = cover(max_, shape);
        const uint64_t need = workspace_bytes(grown);
        if (need > workspace_reserved_) {
            KT_TRY(reserve(need - workspace_reserved_, "the work buffer"));
            workspace_reserved_ = need;
        }
        max_ = grown;
        const int64_t rows = max_.max_tokens * std::min<int64_t>(max_.max_top_k, max_.n_experts);
        KT_TRY(engine_->reserve(max_.max_tokens, rows, max_.hidden, max_.intermediate));
        *out = std::make_unique<CudaLayer>(*this, shape);
        return Status::ok();
    }

    cuda::ExpertEngine &engine() { return *engine_; }
    Status account(uint64_t bytes, const char *what) { return reserve(bytes, what); }
    void unaccount(uint64_t bytes) { release(bytes); }

private:
    std::unique_ptr<cuda::ExpertEngine> engine_;
    LayerShape max_;
    uint64_t workspace_reserved_ = 0;
};

CudaLayer::~CudaLayer() {
    for (void *p : gate_up_) device_.engine().free_device(p);
    for (void *p : down_) device_.engine().free_device(p);
    device_.unaccount(bytes());
}

Status CudaLayer::upload_matrix(const ops::MatrixView &m, void *dst) {
    if (gpu_converts(m.type)) return device_.engine().upload_bf16(m.type, m.data, m.rows, m.cols, m.row_bytes, dst);
    std::vector<float> row(static_cast<size_t>(m.cols));
    return device_.engine().upload_rows_bf16(m.rows, m.cols,
                                             [&](int64_t r, uint16_t *out) {
                                                 ref::dequantize_row(m.type, m.data + r * m.row_bytes, row.data(), m.cols);
                                                 for (int64_t c = 0; c < m.cols; ++c)
                                                     out[c] = f32_to_bf16(row[static_cast<size_t>(c)]);
                                             },
                                             dst);
}

Status CudaLayer::upload(int64_t expert, const ops::MatrixView &gate, const ops::MatrixView &up,
                         const ops::MatrixView &down) {
    KT_TRY(check_upload(expert, gate, up, down));
    const int64_t H = shape_.hidden, I = shape_.intermediate;
    const size_t e = static_cast<size_t>(expert);
    if (!resident(expert)) {
        KT_TRY(device_.account(expert_bytes(H, I), "an expert"));
        Status s = device_.engine().alloc_device(static_cast<uint64_t>(2 * I * H) * 2, &gate_up_[e]);
        if (s.is_ok()) s = device_.engine().alloc_device(static_cast<uint64_t>(H * I) * 2, &down_[e]);
        if (!s.is_ok()) {
            device_.engine().free_device(gate_up_[e]);
            gate_up_[e] = nullptr;
            device_.unaccount(expert_bytes(H, I));
            return s;
        }
        mark_resident(expert);
    }
    KT_TRY(upload_matrix(gate, gate_up_[e]));
    KT_TRY(upload_matrix(up, static_cast<uint8_t *>(gate_up_[e]) + I * H * 2));
    KT_TRY(upload_matrix(down, down_[e]));
    return Status::ok();
}

Status CudaLayer::evict(int64_t expert) {
    if (!resident(expert)) return Status::ok();
    const size_t e = static_cast<size_t>(expert);
    device_.engine().free_device(gate_up_[e]);
    device_.engine().free_device(down_[e]);
    gate_up_[e] = down_[e] = nullptr;
    unmark_resident(expert);
    device_.unaccount(expert_bytes(shape_.hidden, shape_.intermediate));
    return Status::ok();
}

Status CudaLayer::submit(const ExpertWork &work, Event *event) {
    KT_TRY(check_work(work));
    plan_rows(work, resident_, shape_.n_experts, &plan_);
    cuda::ExpertCall c;
    c.n_tokens = work.n_tokens;
    c.hidden = shape_.hidden;
    c.intermediate = shape_.intermediate;
    c.n_experts = shape_.n_experts;
    c.input = work.input;
    c.expert_begin = plan_.expert_begin.data();
    c.row_token = plan_.row_token.data();
    c.row_weight = plan_.row_weight.data();
    c.token_begin = plan_.token_begin.data();
    c.token_rows = plan_.token_rows.data();
    c.gate_up = gate_up_.data();
    c.down = down_.data();
    c.output = work.output;
    return device_.engine().submit(c, &event->ticket);
}

Status CudaLayer::wait(const Event &event, Interval *when) {
    Interval w;
    KT_TRY(device_.engine().wait(event.ticket, &w.begin_ns, &w.end_ns));
    if (when) *when = w;
    return Status::ok();
}

}  // namespace

Status create_cuda_device(const DeviceOptions &options, std::shared_ptr<Device> *out) {
    std::unique_ptr<cuda::ExpertEngine> engine;
    KT_TRY(cuda::ExpertEngine::create(options.index, kUploadSlotBytes, &engine));
    *out = std::make_shared<CudaDevice>(options, std::move(engine));
    return Status::ok();
}

}  // namespace kt::device
