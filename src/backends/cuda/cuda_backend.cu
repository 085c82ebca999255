// The CUDA backend: device discovery and dequantization kernels.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>

#include "backends/cuda/cuda_backend.h"

namespace kt::cuda {
namespace {

Status cuda_error(cudaError_t e, const char *what) {
    return Status::error(KT_STATUS_INTERNAL, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

#define KT_CUDA_TRY(call, what)                          \
    do {                                                 \
        const cudaError_t kt_cuda_e_ = (call);           \
        if (kt_cuda_e_ != cudaSuccess) return cuda_error(kt_cuda_e_, what); \
    } while (0)

// Device buffers freed on every path out of a function.
struct DeviceBuffer {
    void *ptr = nullptr;
    ~DeviceBuffer() {
        if (ptr) cudaFree(ptr);
    }
};

constexpr int kQ8Block = 32;
constexpr int kQ8BlockBytes = 34;
constexpr int kQ4Block = 32;
constexpr int kQ4BlockBytes = 18;

// Bit-exact with the scalar reference: one IEEE multiply per element (no FMA is possible in q * d).
__global__ void dequantize_q8_0_kernel(const uint8_t *src, float *dst, int64_t n_blocks) {
    const int64_t block = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y;
    if (block >= n_blocks) return;
    const uint8_t *b = src + block * kQ8BlockBytes;
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(b[0] | (b[1] << 8))));
    const int i = threadIdx.x;  // 0..31
    dst[block * kQ8Block + i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
}

__global__ void dequantize_q4_0_kernel(const uint8_t *src, float *dst, int64_t n_blocks) {
    const int64_t block = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y;
    if (block >= n_blocks) return;
    const uint8_t *b = src + block * kQ4BlockBytes;
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(b[0] | (b[1] << 8))));
    const int i = threadIdx.x;  // element 0..31: low nibbles hold 0..15, high nibbles 16..31
    const uint8_t q = b[2 + (i & 15)];
    const int v = (i < 16 ? (q & 0x0F) : (q >> 4)) - 8;
    dst[block * kQ4Block + i] = static_cast<float>(v) * d;
}

__global__ void widen_16_kernel(const uint16_t *src, float *dst, int64_t n, bool bf16) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    dst[i] = bf16 ? __uint_as_float(static_cast<uint32_t>(src[i]) << 16) : __half2float(__ushort_as_half(src[i]));
}

}  // namespace

bool compiled() { return true; }

Status list_devices(std::vector<DeviceInfo> *out, std::string *why_none) {
    out->clear();
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        // No driver, or no device: a normal situation for a CPU-first library, not an error.
        if (why_none) *why_none = cudaGetErrorString(e);
        cudaGetLastError();  // clear the sticky error
        return Status::ok();
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop;
        KT_CUDA_TRY(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
        DeviceInfo info;
        info.index = i;
        info.name = prop.name;
        info.total_memory = prop.totalGlobalMem;
        info.compute_major = prop.major;
        info.compute_minor = prop.minor;
        out->push_back(info);
    }
    if (count == 0 && why_none) *why_none = "no CUDA device";
    return Status::ok();
}

Status dequantize_rows(int device, int32_t type, const void *src, int64_t n_rows, int64_t n_per_row, float *dst) {
    int64_t block = 1, block_bytes = 0;
    switch (type) {
        case KT_TYPE_F16: case KT_TYPE_BF16: block_bytes = 2; break;
        case KT_TYPE_Q8_0: block = kQ8Block; block_bytes = kQ8BlockBytes; break;
        case KT_TYPE_Q4_0: block = kQ4Block; block_bytes = kQ4BlockBytes; break;
        default: return Status::error(KT_STATUS_UNSUPPORTED, "CUDA dequantize: type %d is not supported", type);
    }
    KT_RETURN_IF(n_rows < 0 || n_per_row <= 0 || n_per_row % block != 0, KT_STATUS_INVALID_ARGUMENT,
                 "CUDA dequantize: bad shape %lld x %lld", static_cast<long long>(n_rows), static_cast<long long>(n_per_row));
    const int64_t n = n_rows * n_per_row;
    const int64_t src_bytes = n / block * block_bytes;
    if (n == 0) return Status::ok();

    KT_CUDA_TRY(cudaSetDevice(device), "cudaSetDevice");
    DeviceBuffer d_src, d_dst;
    KT_CUDA_TRY(cudaMalloc(&d_src.ptr, static_cast<size_t>(src_bytes)), "cudaMalloc");
    KT_CUDA_TRY(cudaMalloc(&d_dst.ptr, static_cast<size_t>(n) * sizeof(float)), "cudaMalloc");
    KT_CUDA_TRY(cudaMemcpy(d_src.ptr, src, static_cast<size_t>(src_bytes), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    const auto *s = static_cast<const uint8_t *>(d_src.ptr);
    auto *d = static_cast<float *>(d_dst.ptr);
    if (block == 1) {
        const int threads = 256;
        widen_16_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads>>>(
            reinterpret_cast<const uint16_t *>(s), d, n, type == KT_TYPE_BF16);
    } else {
        // One warp per block of 32 elements, 8 blocks per thread block.
        const dim3 threads(32, 8);
        const int64_t n_blocks = n / block;
        const unsigned grid = static_cast<unsigned>((n_blocks + threads.y - 1) / threads.y);
        if (type == KT_TYPE_Q8_0) dequantize_q8_0_kernel<<<grid, threads>>>(s, d, n_blocks);
        else dequantize_q4_0_kernel<<<grid, threads>>>(s, d, n_blocks);
    }
    KT_CUDA_TRY(cudaGetLastError(), "kernel launch");
    KT_CUDA_TRY(cudaMemcpy(dst, d, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return Status::ok();
}

}  // namespace kt::cuda
