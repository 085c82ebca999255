// The CUDA backend when libkt is built without CUDA: every entry point reports that plainly.
#include "backends/cuda/cuda_backend.h"

namespace kt::cuda {

bool compiled() { return false; }

Status list_devices(std::vector<DeviceInfo> *, std::string *) {
    return Status::error(KT_STATUS_UNSUPPORTED, "libkt was built without CUDA (configure with -DKT_WITH_CUDA=ON)");
}

Status dequantize_rows(int, int32_t, const void *, int64_t, int64_t, float *) {
    return Status::error(KT_STATUS_UNSUPPORTED, "libkt was built without CUDA (configure with -DKT_WITH_CUDA=ON)");
}

}  // namespace kt::cuda

// The expert engine (cuda_experts.h) likewise.
#include "backends/cuda/cuda_experts.h"

namespace kt::cuda {

Status ExpertEngine::create(int, uint64_t, std::unique_ptr<ExpertEngine> *) {
    return Status::error(KT_STATUS_UNSUPPORTED, "libkt was built without CUDA (configure with -DKT_WITH_CUDA=ON)");
}

}  // namespace kt::cuda
