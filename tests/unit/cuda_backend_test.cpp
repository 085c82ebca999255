// The CUDA backend: without a GPU (the development machines) only its host-side behaviour is checked and the
// device half says that it was skipped; on a GPU machine the kernels are compared with the scalar reference.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "kt.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

using namespace kt;

TEST_CASE("cuda: device discovery never fails for lack of a GPU") {
    std::vector<cuda::DeviceInfo> devices;
    std::string why;
    Status s = cuda::list_devices(&devices, &why);
    int32_t count = -1;
    const kt_status api = kt_cuda_device_count(&count);
    if (!cuda::compiled()) {
        CHECK(s.code() == KT_STATUS_UNSUPPORTED);
        CHECK(api == KT_STATUS_UNSUPPORTED);
        WARN("libkt built without CUDA: only the disabled backend was checked");
        return;
    }
    REQUIRE(s.is_ok());
    REQUIRE(api == KT_STATUS_OK);
    CHECK(count == static_cast<int32_t>(devices.size()));
    CHECK(kt_cuda_device_count(nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(kt_build_info()).find("cuda") != std::string::npos);
    if (devices.empty()) WARN("no CUDA device (" << why << "): the CUDA kernel tests are skipped");
    for (const auto &d : devices) INFO(d.name << " sm_" << d.compute_major << d.compute_minor);
}

TEST_CASE("cuda: dequantization kernels equal the scalar reference bit for bit") {
    std::vector<cuda::DeviceInfo> devices;
    std::string why;
    if (!cuda::compiled() || !cuda::list_devices(&devices, &why).is_ok() || devices.empty()) {
        WARN("no CUDA device available: skipped (" << (cuda::compiled() ? why : "built without CUDA") << ")");
        // The argument checks run on the host and are testable without a GPU.
        if (cuda::compiled())
            CHECK(cuda::dequantize_rows(0, KT_TYPE_Q4_K, nullptr, 1, 256, nullptr).code() == KT_STATUS_UNSUPPORTED);
        return;
    }
    std::mt19937 rng(7);
    for (int32_t type : {KT_TYPE_F16, KT_TYPE_BF16, KT_TYPE_Q8_0, KT_TYPE_Q4_0}) {
        const ops::TypeTraits &t = *ops::type_traits(type);
        for (int64_t rows : {1, 3, 1000}) {
            const int64_t per_row = 32 * 7;
            std::vector<uint8_t> src(static_cast<size_t>(rows * ops::row_bytes(t, per_row)));
            for (auto &b : src) b = static_cast<uint8_t>(rng());
            // Keep the f16 scales / values finite and non-NaN so that bit comparison is meaningful.
            for (size_t i = 1; i < src.size(); i += 2) src[i] &= 0x3B;
            std::vector<float> gpu(static_cast<size_t>(rows * per_row)), ref(gpu.size());
            REQUIRE(cuda::dequantize_rows(0, type, src.data(), rows, per_row, gpu.data()).is_ok());
            for (int64_t r = 0; r < rows; ++r)
                ref::dequantize_row(type, src.data() + r * ops::row_bytes(t, per_row), ref.data() + r * per_row, per_row);
            INFO(t.name << " rows " << rows);
            CHECK(std::memcmp(gpu.data(), ref.data(), gpu.size() * sizeof(float)) == 0);
        }
    }
}
