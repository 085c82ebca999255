// The CPU stand-in device: the device side of the hybrid path on a thread of its own.
//
// Everything a GPU would hold lives in buffers this device owns and accounts for like device memory: each
// resident expert's BF16 weights (uploaded by explicit conversion and copy), and the shared work buffer (the
// input copied in at submit, the output copied out when the work is done). Calls run one after another on the
// device thread in submission order, as on a stream, so the host's scheduling (submit, overlap, wait) is the
// one a GPU would see.
#include <condition_variable>
#include <deque>
#include <thread>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "device/device.h"
#include "ops/ref/quants_ref.h"

namespace kt::device {
namespace {

class StandInDevice;

class StandInLayer final : public DeviceLayer {
public:
    StandInLayer(StandInDevice &device, const LayerShape &shape)
        : DeviceLayer(shape), device_(device), gate_up_(static_cast<size_t>(shape.n_experts)),
          down_(static_cast<size_t>(shape.n_experts)), gate_up_ptr_(static_cast<size_t>(shape.n_experts), nullptr),
          down_ptr_(static_cast<size_t>(shape.n_experts), nullptr) {}
    ~StandInLayer() override;

    Status upload(int64_t expert, const ops::MatrixView &gate, const ops::MatrixView &up,
                  const ops::MatrixView &down) override;
    Status evict(int64_t expert) override;
    Status submit(const ExpertWork &work, Event *event) override;
    Status wait(const Event &event, Interval *when) override;

    // Device thread.
    void run(int64_t n_tokens, float *device_out);

    StandInDevice &device_;
    std::vector<std::vector<uint16_t>> gate_up_, down_;  // per expert, empty unless resident
    std::vector<const uint16_t *> gate_up_ptr_, down_ptr_;
    RowPlan plan_;
};

class StandInDevice final : public Device {
public:
    explicit StandInDevice(const DeviceOptions &options) : Device(options) {}
    ~StandInDevice() override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
        release(workspace_reserved_);
    }

    std::string name() const override { return "cpu-standin (one thread)"; }

    Status create_layer(const LayerShape &shape, std::unique_ptr<DeviceLayer> *out) override {
        KT_RETURN_IF(shape.n_experts <= 0 || shape.hidden <= 0 || shape.intermediate <= 0 || shape.max_tokens <= 0 ||
                         shape.max_top_k <= 0,
                     KT_STATUS_INVALID_ARGUMENT, "device: bad layer shape");
        KT_TRY(grow_workspace(shape));
        *out = std::make_unique<StandInLayer>(*this, shape);
        return Status::ok();
    }

    Status grow_workspace(const LayerShape &shape) {
        std::lock_guard<std::mutex> lock(mutex_);
        // Sized like the CUDA device's: for the shape covering every layer so far.
        const LayerShape grown = cover(max_, shape);
        const uint64_t need = workspace_bytes(grown);
        if (need > workspace_reserved_) {
            KT_TRY(reserve(need - workspace_reserved_, "the work buffer"));
            workspace_reserved_ = need;
        }
        max_ = grown;
        max_elems_ = max_.max_tokens * max_.hidden;
        input_.resize(static_cast<size_t>(max_elems_));
        output_.resize(static_cast<size_t>(max_elems_));
        if (!thread_.joinable()) thread_ = std::thread([this] { main(); });
        return Status::ok();
    }

    Status account(uint64_t bytes, const char *what) { return reserve(bytes, what); }
    void unaccount(uint64_t bytes) { release(bytes); }

    // Host side of submit: the copy "to the device" and the queue entry.
    uint64_t enqueue(StandInLayer *layer, const ExpertWork &work) {
        std::unique_lock<std::mutex> lock(mutex_);
        // One call in flight: the work buffer is shared, as on a GPU where the next layer's input is staged only
        // after the previous output was copied out.
        done_cv_.wait(lock, [&] { return completed_ == submitted_; });
        const int64_t H = layer->shape().hidden;
        std::copy(work.input, work.input + work.n_tokens * H, input_.begin());
        plan_rows(work, layer->resident_mask(), layer->shape().n_experts, &layer->plan_);
        current_ = {layer, work.n_tokens, work.output};
        const uint64_t t = ++submitted_;
        cv_.notify_all();
        return t;
    }

    Status wait(uint64_t ticket, Interval *when) {
        std::unique_lock<std::mutex> lock(mutex_);
        KT_RETURN_IF(ticket == 0 || ticket > submitted_, KT_STATUS_INVALID_ARGUMENT, "device: wait for unknown event %llu",
                     static_cast<unsigned long long>(ticket));
        done_cv_.wait(lock, [&] { return completed_ >= ticket; });
        if (when) *when = last_;
        return Status::ok();
    }

    const std::vector<float> &input() const { return input_; }

private:
    struct Pending {
        StandInLayer *layer = nullptr;
        int64_t n_tokens = 0;
        float *host_out = nullptr;
    };

    void main() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            cv_.wait(lock, [&] { return stop_ || completed_ < submitted_; });
            if (completed_ < submitted_) {
                const Pending p = current_;
                lock.unlock();
                Interval when;
                when.begin_ns = monotonic_ns();
                if (options_.on_work_begin) options_.on_work_begin();
                p.layer->run(p.n_tokens, output_.data());
                const int64_t H = p.layer->shape().hidden;
                std::copy(output_.begin(), output_.begin() + p.n_tokens * H, p.host_out);  // "device to host"
                when.end_ns = monotonic_ns();
                lock.lock();
                last_ = when;
                ++completed_;
                done_cv_.notify_all();
                continue;
            }
            if (stop_) return;
        }
    }

    std::mutex mutex_;
    std::condition_variable cv_, done_cv_;
    std::thread thread_;
    bool stop_ = false;
    uint64_t submitted_ = 0, completed_ = 0;
    Pending current_;
    Interval last_;
    uint64_t workspace_reserved_ = 0;
    LayerShape max_;
    int64_t max_elems_ = 0;
    std::vector<float> input_, output_;  // the work buffer's x and out
};

StandInLayer::~StandInLayer() { device_.unaccount(bytes()); }

Status StandInLayer::upload(int64_t expert, const ops::MatrixView &gate, const ops::MatrixView &up,
                            const ops::MatrixView &down) {
    KT_TRY(check_upload(expert, gate, up, down));
    const int64_t H = shape_.hidden, I = shape_.intermediate;
    if (!resident(expert)) KT_TRY(device_.account(expert_bytes(H, I), "an expert"));
    std::vector<uint16_t> &gu = gate_up_[static_cast<size_t>(expert)], &d = down_[static_cast<size_t>(expert)];
    gu.resize(static_cast<size_t>(2 * I * H));
    d.resize(static_cast<size_t>(H * I));
    std::vector<float> row(static_cast<size_t>(std::max(H, I)));
    auto convert = [&](const ops::MatrixView &m, uint16_t *dst) {
        for (int64_t r = 0; r < m.rows; ++r) {
            ref::dequantize_row(m.type, m.data + r * m.row_bytes, row.data(), m.cols);
            for (int64_t c = 0; c < m.cols; ++c) dst[r * m.cols + c] = f32_to_bf16(row[static_cast<size_t>(c)]);
        }
    };
    convert(gate, gu.data());
    convert(up, gu.data() + I * H);
    convert(down, d.data());
    gate_up_ptr_[static_cast<size_t>(expert)] = gu.data();
    down_ptr_[static_cast<size_t>(expert)] = d.data();
    mark_resident(expert);
    return Status::ok();
}

Status StandInLayer::evict(int64_t expert) {
    if (!resident(expert)) return Status::ok();
    const size_t e = static_cast<size_t>(expert);
    std::vector<uint16_t>().swap(gate_up_[e]);
    std::vector<uint16_t>().swap(down_[e]);
    gate_up_ptr_[e] = nullptr;
    down_ptr_[e] = nullptr;
    unmark_resident(expert);
    device_.unaccount(expert_bytes(shape_.hidden, shape_.intermediate));
    return Status::ok();
}

Status StandInLayer::submit(const ExpertWork &work, Event *event) {
    KT_TRY(check_work(work));
    event->ticket = device_.enqueue(this, work);
    return Status::ok();
}

Status StandInLayer::wait(const Event &event, Interval *when) { return device_.wait(event.ticket, when); }

void StandInLayer::run(int64_t n_tokens, float *device_out) {
    compute_rows_bf16(shape_, n_tokens, device_.input().data(), plan_, gate_up_ptr_.data(), down_ptr_.data(), device_out);
}

}  // namespace

Status create_standin_device(const DeviceOptions &options, std::shared_ptr<Device> *out) {
    *out = std::make_shared<StandInDevice>(options);
    return Status::ok();
}

}  // namespace kt::device
