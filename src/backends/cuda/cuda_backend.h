// The CUDA backend's host-side interface. It includes no CUDA header, so every translation unit can use it;
// without CUDA (KT_WITH_CUDA=OFF, or no toolkit) it is implemented by cuda_backend_none.cpp and says so.
//
// What exists today: device discovery and dequantization kernels, which give the build a real CUDA path to
// compile, link and (on a GPU machine) test. The GPU side of the expert engine will grow from here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kt::cuda {

// True when libkt was built with the CUDA backend.
bool compiled();

struct DeviceInfo {
    int index = 0;
    std::string name;
    uint64_t total_memory = 0;
    int compute_major = 0, compute_minor = 0;
};

// The CUDA devices this process can use. No driver or no GPU is not an error: *out is empty and *why_none says
// why (the CUDA runtime's message). Built without CUDA: UNSUPPORTED.
Status list_devices(std::vector<DeviceInfo> *out, std::string *why_none);

// Dequantizes n_rows rows of n_per_row elements (a multiple of the block size) of `type` on `device`, from host
// memory to host memory. Types: F16, BF16, Q8_0, Q4_0. Results equal the scalar reference bit for bit.
Status dequantize_rows(int device, int32_t type, const void *src, int64_t n_rows, int64_t n_per_row, float *dst);

}  // namespace kt::cuda
