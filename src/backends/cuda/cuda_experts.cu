// The grouped expert FFN on a GPU (see cuda_experts.h for the data flow).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "backends/cuda/cuda_experts.h"

namespace kt::cuda {
namespace {

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

Status cuda_status(cudaError_t e, const char *what) {
    return Status::error(KT_STATUS_INTERNAL, "CUDA: %s: %s", what, cudaGetErrorString(e));
}
Status cublas_status(cublasStatus_t s, const char *what) {
    return Status::error(KT_STATUS_INTERNAL, "cuBLAS: %s: status %d", what, static_cast<int>(s));
}

#define KT_CU(call, what)                                                   \
    do {                                                                    \
        const cudaError_t kt_cu_e_ = (call);                                \
        if (kt_cu_e_ != cudaSuccess) return cuda_status(kt_cu_e_, what);    \
    } while (0)
#define KT_CUBLAS(call, what)                                                      \
    do {                                                                           \
        const cublasStatus_t kt_cb_s_ = (call);                                    \
        if (kt_cb_s_ != CUBLAS_STATUS_SUCCESS) return cublas_status(kt_cb_s_, what); \
    } while (0)

// cuBLAS is opened when the first engine is created, not linked: the toolkit ships it as a shared library of
// several hundred megabytes (cuBLASLt), which every program linking libkt would otherwise map and relocate at
// start - on machines without a GPU too.
struct Cublas {
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    decltype(&cublasSetStream_v2) set_stream = nullptr;
    // The C entry point (cublas_api.h also declares a C++ overload of the same name).
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                      const void *, cudaDataType, int, const void *, cudaDataType, int, const void *,
                                      void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    GemmEx gemm_ex = nullptr;
    std::string error;
};

const Cublas &cublas() {
    static Cublas api;
    static std::once_flag once;
    std::call_once(once, [] {
        void *lib = nullptr;
        for (const char *name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
            if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
        if (!lib) {
            const char *e = dlerror();
            api.error = std::string("cannot open libcublas.so: ") + (e ? e : "not found");
            return;
        }
        api.create = reinterpret_cast<decltype(api.create)>(dlsym(lib, "cublasCreate_v2"));
        api.destroy = reinterpret_cast<decltype(api.destroy)>(dlsym(lib, "cublasDestroy_v2"));
        api.set_stream = reinterpret_cast<decltype(api.set_stream)>(dlsym(lib, "cublasSetStream_v2"));
        api.gemm_ex = reinterpret_cast<decltype(api.gemm_ex)>(dlsym(lib, "cublasGemmEx"));
        if (!api.create || !api.destroy || !api.set_stream || !api.gemm_ex) {
            api.error = "libcublas.so lacks cublasCreate_v2 / cublasDestroy_v2 / cublasSetStream_v2 / cublasGemmEx";
            api.create = nullptr;
        }
    });
    return api;
}

constexpr int kBlock = 32;
constexpr int kQ8Bytes = 34, kQ4Bytes = 18;

// ---- dequantization to bf16 (one thread per element) ------------------------------------------------------

__global__ void to_bf16_kernel(int32_t type, const uint8_t *src, int64_t rows, int64_t cols, int64_t row_bytes,
                               __nv_bfloat16 *dst) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i % cols;
    const uint8_t *row = src + r * row_bytes;
    float v = 0.0f;
    if (type == KT_TYPE_F32) {
        v = reinterpret_cast<const float *>(row)[c];
    } else if (type == KT_TYPE_F16) {
        v = __half2float(__ushort_as_half(reinterpret_cast<const unsigned short *>(row)[c]));
    } else if (type == KT_TYPE_BF16) {
        v = __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t *>(row)[c]) << 16);
    } else if (type == KT_TYPE_Q8_0) {
        const uint8_t *b = row + (c / kBlock) * kQ8Bytes;
        const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(b[0] | (b[1] << 8))));
        v = static_cast<float>(static_cast<int8_t>(b[2 + c % kBlock])) * d;
    } else {  // Q4_0
        const uint8_t *b = row + (c / kBlock) * kQ4Bytes;
        const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(b[0] | (b[1] << 8))));
        const int j = static_cast<int>(c % kBlock);
        const uint8_t q = b[2 + (j & 15)];
        v = static_cast<float>((j < 16 ? (q & 0x0F) : (q >> 4)) - 8) * d;
    }
    dst[i] = __float2bfloat16_rn(v);
}

// ---- the FFN's element-wise kernels ------------------------------------------------------------------------

// xg[r][:] = bf16(x[row_token[r]][:])
__global__ void gather_kernel(const float *x, const int32_t *row_token, int64_t rows, int64_t H, __nv_bfloat16 *xg) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * H) return;
    const int64_t r = i / H, c = i % H;
    xg[i] = __float2bfloat16_rn(x[static_cast<int64_t>(row_token[r]) * H + c]);
}

// h[r][i] = bf16(silu(gu[r][i]) * gu[r][I + i])
__global__ void swiglu_kernel(const float *gu, int64_t rows, int64_t I, __nv_bfloat16 *h) {
    const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (k >= rows * I) return;
    const int64_t r = k / I, i = k % I;
    const float g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i];
    h[k] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
}

// out[t][n] = Σ over the rows of token t, in slot order, of row_weight · y[row][n]
__global__ void combine_kernel(const float *y, const float *row_weight, const int32_t *token_begin,
                               const int32_t *token_rows, int64_t T, int64_t H, float *out) {
    const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (k >= T * H) return;
    const int64_t t = k / H, n = k % H;
    float acc = 0.0f;
    for (int32_t j = token_begin[t]; j < token_begin[t + 1]; ++j) {
        const int32_t r = token_rows[j];
        acc += row_weight[r] * y[static_cast<int64_t>(r) * H + n];
    }
    out[k] = acc;
}

unsigned grid_of(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// ---- the engine ----------------------------------------------------------------------------------------------

// One of the two buffers uploads pass through: pinned host memory the host fills, device memory the stored rows
// are converted from, and an event recorded after the slot's last use on the upload stream.
struct UploadSlot {
    void *pinned = nullptr;
    void *staged = nullptr;
    cudaEvent_t used = nullptr;
};

class Engine final : public ExpertEngine {
public:
    ~Engine() override {
        if (stream_) cudaStreamSynchronize(stream_);
        if (upload_stream_) cudaStreamSynchronize(upload_stream_);
        free_buffers();
        for (UploadSlot &slot : slots_) {
            if (slot.pinned) cudaFreeHost(slot.pinned);
            if (slot.staged) cudaFree(slot.staged);
            if (slot.used) cudaEventDestroy(slot.used);
        }
        if (handle_) cublas().destroy(handle_);
        if (start_) cudaEventDestroy(start_);
        if (done_) cudaEventDestroy(done_);
        if (stream_) cudaStreamDestroy(stream_);
        if (upload_stream_) cudaStreamDestroy(upload_stream_);
    }

    Status init(int device, uint64_t upload_slot_bytes) {
        device_ = device;
        slot_bytes_ = upload_slot_bytes;
        KT_CU(cudaSetDevice(device), "cudaSetDevice");
        KT_CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        KT_CU(cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking), "cudaStreamCreate uploads");
        KT_CU(cudaEventCreate(&start_), "cudaEventCreate");
        KT_CU(cudaEventCreate(&done_), "cudaEventCreate");
        for (UploadSlot &slot : slots_) {
            KT_CU(cudaEventCreateWithFlags(&slot.used, cudaEventDisableTiming), "cudaEventCreate upload slot");
            KT_CU(cudaMallocHost(&slot.pinned, slot_bytes_), "cudaMallocHost upload slot");
        }
        const Cublas &api = cublas();
        KT_RETURN_IF(!api.create, KT_STATUS_UNSUPPORTED, "CUDA experts: %s", api.error.c_str());
        KT_CUBLAS(api.create(&handle_), "cublasCreate");
        KT_CUBLAS(api.set_stream(handle_, stream_), "cublasSetStream");
        return Status::ok();
    }

    Status reserve(int64_t max_tokens, int64_t max_rows, int64_t hidden, int64_t intermediate) override {
        KT_CU(cudaSetDevice(device_), "cudaSetDevice");
        {
            // The upload slots' device halves, once (the device counts them in its work buffer).
            std::lock_guard<std::mutex> lock(upload_mutex_);
            for (UploadSlot &slot : slots_)
                if (!slot.staged) KT_CU(cudaMalloc(&slot.staged, slot_bytes_), "cudaMalloc upload slot");
        }
        if (max_tokens <= T_ && max_rows <= R_ && hidden <= H_ && intermediate <= I_) return Status::ok();
        KT_CU(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        free_buffers();
        T_ = std::max(T_, max_tokens);
        R_ = std::max(R_, max_rows);
        H_ = std::max(H_, hidden);
        I_ = std::max(I_, intermediate);
        const size_t T = static_cast<size_t>(T_), R = static_cast<size_t>(R_), H = static_cast<size_t>(H_),
                     I = static_cast<size_t>(I_);
        KT_CU(cudaMalloc(&x_, T * H * 4), "cudaMalloc x");
        KT_CU(cudaMalloc(&xg_, R * H * 2), "cudaMalloc xg");
        KT_CU(cudaMalloc(&gu_, R * 2 * I * 4), "cudaMalloc gu");
        KT_CU(cudaMalloc(&h_, R * I * 2), "cudaMalloc h");
        KT_CU(cudaMalloc(&y_, R * H * 4), "cudaMalloc y");
        KT_CU(cudaMalloc(&out_, T * H * 4), "cudaMalloc out");
        KT_CU(cudaMalloc(&routing_, (3 * R + T + 1) * 4), "cudaMalloc routing");
        KT_CU(cudaMallocHost(&pin_x_, T * H * 4), "cudaMallocHost x");
        KT_CU(cudaMallocHost(&pin_out_, T * H * 4), "cudaMallocHost out");
        KT_CU(cudaMallocHost(&pin_routing_, (3 * R + T + 1) * 4), "cudaMallocHost routing");
        return Status::ok();
    }

    Status alloc_device(uint64_t bytes, void **out) override {
        KT_CU(cudaSetDevice(device_), "cudaSetDevice");
        KT_CU(cudaMalloc(out, bytes), "cudaMalloc weights");
        return Status::ok();
    }
    void free_device(void *ptr) override {
        if (ptr) cudaFree(ptr);
    }

    Status upload_bf16(int32_t type, const void *src, int64_t rows, int64_t cols, int64_t row_bytes, void *dst) override {
        KT_RETURN_IF(type != KT_TYPE_F32 && type != KT_TYPE_F16 && type != KT_TYPE_BF16 && type != KT_TYPE_Q8_0 &&
                         type != KT_TYPE_Q4_0,
                     KT_STATUS_UNSUPPORTED, "CUDA upload: type %d is converted on the host first", type);
        KT_RETURN_IF((type == KT_TYPE_Q8_0 || type == KT_TYPE_Q4_0) && cols % kBlock != 0, KT_STATUS_INVALID_ARGUMENT,
                     "CUDA upload: %lld columns is not a multiple of the block", static_cast<long long>(cols));
        const auto *from = static_cast<const uint8_t *>(src);
        auto *to = static_cast<__nv_bfloat16 *>(dst);
        if (type == KT_TYPE_BF16) {  // already bf16: straight from the slot into place, nothing to convert
            return upload_chunks(rows, cols * 2,
                                 [&](int64_t r0, int64_t n, uint8_t *pinned) {
                                     for (int64_t r = 0; r < n; ++r)
                                         std::memcpy(pinned + r * cols * 2, from + (r0 + r) * row_bytes,
                                                     static_cast<size_t>(cols * 2));
                                 },
                                 [&](int64_t r0, int64_t n, const UploadSlot &slot) {
                                     KT_CU(cudaMemcpyAsync(to + r0 * cols, slot.pinned, static_cast<size_t>(n * cols * 2),
                                                           cudaMemcpyHostToDevice, upload_stream_),
                                           "upload copy");
                                     return Status::ok();
                                 });
        }
        // Stored rows through the slot's device half, converted into place there: the bus carries the stored size.
        return upload_chunks(rows, row_bytes,
                             [&](int64_t r0, int64_t n, uint8_t *pinned) {
                                 std::memcpy(pinned, from + r0 * row_bytes, static_cast<size_t>(n * row_bytes));
                             },
                             [&](int64_t r0, int64_t n, const UploadSlot &slot) {
                                 KT_CU(cudaMemcpyAsync(slot.staged, slot.pinned, static_cast<size_t>(n * row_bytes),
                                                       cudaMemcpyHostToDevice, upload_stream_),
                                       "upload copy");
                                 to_bf16_kernel<<<grid_of(n * cols, 256), 256, 0, upload_stream_>>>(
                                     type, static_cast<const uint8_t *>(slot.staged), n, cols, row_bytes, to + r0 * cols);
                                 KT_CU(cudaGetLastError(), "upload conversion kernel");
                                 return Status::ok();
                             });
    }

    Status upload_rows_bf16(int64_t rows, int64_t cols, FunctionRef<void(int64_t, uint16_t *)> row_to_bf16,
                            void *dst) override {
        auto *to = static_cast<__nv_bfloat16 *>(dst);
        return upload_chunks(rows, cols * 2,
                             [&](int64_t r0, int64_t n, uint8_t *pinned) {
                                 for (int64_t r = 0; r < n; ++r)
                                     row_to_bf16(r0 + r, reinterpret_cast<uint16_t *>(pinned) + r * cols);
                             },
                             [&](int64_t r0, int64_t n, const UploadSlot &slot) {
                                 KT_CU(cudaMemcpyAsync(to + r0 * cols, slot.pinned, static_cast<size_t>(n * cols * 2),
                                                       cudaMemcpyHostToDevice, upload_stream_),
                                       "upload copy");
                                 return Status::ok();
                             });
    }

    Status submit(const ExpertCall &c, uint64_t *ticket) override {
        const int64_t T = c.n_tokens, H = c.hidden, I = c.intermediate;
        const int64_t R = c.expert_begin[c.n_experts];
        KT_RETURN_IF(T > T_ || R > R_ || H > H_ || I > I_, KT_STATUS_INVALID_ARGUMENT,
                     "CUDA experts: call larger than the reserved work buffer");
        KT_CU(cudaSetDevice(device_), "cudaSetDevice");
        // One call in flight: the staging buffers are reused by the next one.
        if (submitted_ > completed_) KT_TRY(finish());
        begin_ns_ = steady_ns();
        std::memcpy(pin_x_, c.input, static_cast<size_t>(T * H) * 4);
        int32_t *pr = static_cast<int32_t *>(pin_routing_);
        std::memcpy(pr, c.row_token, static_cast<size_t>(R) * 4);
        std::memcpy(pr + R, c.row_weight, static_cast<size_t>(R) * 4);
        std::memcpy(pr + 2 * R, c.token_rows, static_cast<size_t>(R) * 4);
        std::memcpy(pr + 3 * R, c.token_begin, static_cast<size_t>(T + 1) * 4);
        const int32_t *d_row_token = static_cast<const int32_t *>(routing_);
        const float *d_row_weight = reinterpret_cast<const float *>(d_row_token + R);
        const int32_t *d_token_rows = d_row_token + 2 * R, *d_token_begin = d_row_token + 3 * R;

        KT_CU(cudaEventRecord(start_, stream_), "cudaEventRecord");
        KT_CU(cudaMemcpyAsync(x_, pin_x_, static_cast<size_t>(T * H) * 4, cudaMemcpyHostToDevice, stream_), "copy x");
        KT_CU(cudaMemcpyAsync(routing_, pin_routing_, static_cast<size_t>(3 * R + T + 1) * 4, cudaMemcpyHostToDevice,
                              stream_),
              "copy routing");
        auto *xg = static_cast<__nv_bfloat16 *>(xg_), *h = static_cast<__nv_bfloat16 *>(h_);
        auto *gu = static_cast<float *>(gu_), *y = static_cast<float *>(y_);
        if (R > 0) {
            gather_kernel<<<grid_of(R * H, 256), 256, 0, stream_>>>(static_cast<const float *>(x_), d_row_token, R, H, xg);
            KT_CU(cudaGetLastError(), "gather kernel");
            const float one = 1.0f, zero = 0.0f;
            // Row-major C[n][2I] = A[n][H] · B[2I][H]ᵀ is, column-major, Cᵀ (2I x n) = op_T(B viewed H x 2I) · Aᵀ.
            for (int64_t e = 0; e < c.n_experts; ++e) {
                const int64_t r0 = c.expert_begin[e], n = c.expert_begin[e + 1] - r0;
                if (n == 0) continue;
                KT_RETURN_IF(!c.gate_up[e] || !c.down[e], KT_STATUS_INTERNAL, "CUDA experts: expert %lld has rows but no weights",
                             static_cast<long long>(e));
                KT_CUBLAS(cublas().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(2 * I), static_cast<int>(n),
                                       static_cast<int>(H), &one, c.gate_up[e], CUDA_R_16BF, static_cast<int>(H),
                                       xg + r0 * H, CUDA_R_16BF, static_cast<int>(H), &zero, gu + r0 * 2 * I, CUDA_R_32F,
                                       static_cast<int>(2 * I), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                          "gate|up GEMM");
            }
            swiglu_kernel<<<grid_of(R * I, 256), 256, 0, stream_>>>(gu, R, I, h);
            KT_CU(cudaGetLastError(), "SwiGLU kernel");
            for (int64_t e = 0; e < c.n_experts; ++e) {
                const int64_t r0 = c.expert_begin[e], n = c.expert_begin[e + 1] - r0;
                if (n == 0) continue;
                KT_CUBLAS(cublas().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(H), static_cast<int>(n),
                                       static_cast<int>(I), &one, c.down[e], CUDA_R_16BF, static_cast<int>(I), h + r0 * I,
                                       CUDA_R_16BF, static_cast<int>(I), &zero, y + r0 * H, CUDA_R_32F, static_cast<int>(H),
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                          "down GEMM");
            }
        }
        combine_kernel<<<grid_of(T * H, 256), 256, 0, stream_>>>(y, d_row_weight, d_token_begin, d_token_rows, T, H,
                                                                 static_cast<float *>(out_));
        KT_CU(cudaGetLastError(), "combine kernel");
        KT_CU(cudaMemcpyAsync(pin_out_, out_, static_cast<size_t>(T * H) * 4, cudaMemcpyDeviceToHost, stream_), "copy out");
        KT_CU(cudaEventRecord(done_, stream_), "cudaEventRecord");
        host_out_ = c.output;
        out_elems_ = T * H;
        *ticket = ++submitted_;
        return Status::ok();
    }

    Status wait(uint64_t ticket, int64_t *begin_ns, int64_t *end_ns) override {
        KT_RETURN_IF(ticket == 0 || ticket > submitted_, KT_STATUS_INVALID_ARGUMENT, "CUDA experts: unknown ticket");
        if (ticket > completed_) KT_TRY(finish());
        if (begin_ns) *begin_ns = begin_ns_;
        if (end_ns) *end_ns = end_ns_;
        return Status::ok();
    }

private:
    // Moves `rows` rows of host_row_bytes each through the two slots in chunks of whole rows: fill(r0, n, pinned)
    // writes rows [r0, r0 + n) into a slot's pinned half on the host, enqueue(r0, n, slot) queues their copy (and
    // conversion) on the upload stream. A slot is filled again only once its previous chunk has left it. Returns
    // when every chunk is in place: the upload stream is idle again, the compute stream was never waited for.
    Status upload_chunks(int64_t rows, int64_t host_row_bytes, FunctionRef<void(int64_t, int64_t, uint8_t *)> fill,
                         FunctionRef<Status(int64_t, int64_t, const UploadSlot &)> enqueue) {
        KT_RETURN_IF(host_row_bytes <= 0 || static_cast<uint64_t>(host_row_bytes) > slot_bytes_, KT_STATUS_UNSUPPORTED,
                     "CUDA upload: a row of %lld bytes does not fit an upload slot of %llu bytes",
                     static_cast<long long>(host_row_bytes), static_cast<unsigned long long>(slot_bytes_));
        std::lock_guard<std::mutex> lock(upload_mutex_);  // the slots are the engine's, layers may load in parallel
        KT_RETURN_IF(!slots_[0].staged || !slots_[1].staged, KT_STATUS_INTERNAL,
                     "CUDA upload before the engine's first reserve()");
        KT_CU(cudaSetDevice(device_), "cudaSetDevice");
        const Status queued = queue_chunks(rows, static_cast<int64_t>(slot_bytes_) / host_row_bytes, fill, enqueue);
        // Also after a failure: nothing queued may still read a slot the next upload fills.
        const cudaError_t e = cudaStreamSynchronize(upload_stream_);
        KT_TRY(queued);
        KT_CU(e, "upload");
        return Status::ok();
    }
    Status queue_chunks(int64_t rows, int64_t per_chunk, FunctionRef<void(int64_t, int64_t, uint8_t *)> fill,
                        FunctionRef<Status(int64_t, int64_t, const UploadSlot &)> enqueue) {
        int next = 0;
        for (int64_t r0 = 0; r0 < rows; r0 += per_chunk, next ^= 1) {
            UploadSlot &slot = slots_[next];
            const int64_t n = std::min(per_chunk, rows - r0);
            KT_CU(cudaEventSynchronize(slot.used), "upload slot");  // never recorded yet: returns at once
            fill(r0, n, static_cast<uint8_t *>(slot.pinned));
            KT_TRY(enqueue(r0, n, slot));
            KT_CU(cudaEventRecord(slot.used, upload_stream_), "upload event");
        }
        return Status::ok();
    }

    Status finish() {
        KT_CU(cudaEventSynchronize(done_), "cudaEventSynchronize");
        float ms = 0.0f;
        KT_CU(cudaEventElapsedTime(&ms, start_, done_), "cudaEventElapsedTime");
        end_ns_ = begin_ns_ + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
        std::memcpy(host_out_, pin_out_, static_cast<size_t>(out_elems_) * 4);
        completed_ = submitted_;
        return Status::ok();
    }

    void free_buffers() {
        for (void *p : {x_, xg_, gu_, h_, y_, out_, routing_})
            if (p) cudaFree(p);
        for (void *p : {pin_x_, pin_out_, pin_routing_})
            if (p) cudaFreeHost(p);
        x_ = xg_ = gu_ = h_ = y_ = out_ = routing_ = pin_x_ = pin_out_ = pin_routing_ = nullptr;
    }

    int device_ = 0;
    cudaStream_t stream_ = nullptr;          // calls, in submission order
    cudaStream_t upload_stream_ = nullptr;   // uploads, beside the calls
    uint64_t slot_bytes_ = 0;
    UploadSlot slots_[2];
    std::mutex upload_mutex_;
    cudaEvent_t start_ = nullptr, done_ = nullptr;
    cublasHandle_t handle_ = nullptr;
    int64_t T_ = 0, R_ = 0, H_ = 0, I_ = 0;
    void *x_ = nullptr, *xg_ = nullptr, *gu_ = nullptr, *h_ = nullptr, *y_ = nullptr, *out_ = nullptr, *routing_ = nullptr;
    void *pin_x_ = nullptr, *pin_out_ = nullptr, *pin_routing_ = nullptr;
    uint64_t submitted_ = 0, completed_ = 0;
    int64_t begin_ns_ = 0, end_ns_ = 0;
    float *host_out_ = nullptr;
    int64_t out_elems_ = 0;
};

}  // namespace

Status ExpertEngine::create(int device, uint64_t upload_slot_bytes, std::unique_ptr<ExpertEngine> *out) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return Status::error(KT_STATUS_UNSUPPORTED, "no CUDA device (%s)",
                             e != cudaSuccess ? cudaGetErrorString(e) : "the runtime found none");
    }
    KT_RETURN_IF(device < 0 || device >= count, KT_STATUS_INVALID_ARGUMENT, "CUDA device %d: %d device(s) present",
                 device, count);
    auto engine = std::make_unique<Engine>();
    KT_TRY(engine->init(device, upload_slot_bytes));
    *out = std::move(engine);
    return Status::ok();
}

}  // namespace kt::cuda
