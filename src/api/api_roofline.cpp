// kt_measure_roofline: the bandwidth and dot-product peak probes for benchmarks.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "api/api_internal.h"
#include "backends/cpu/roofline.h"
#include "mem/pinned_pool.h"

extern "C" {

KT_API kt_status kt_measure_roofline(int32_t n_threads, uint64_t buffer_bytes, kt_roofline *out) {
    kt::Status s = kt::api::guard([&]() -> kt::Status {
        KT_RETURN_IF(!out, KT_STATUS_INVALID_ARGUMENT, "kt_measure_roofline: out is NULL");
        KT_TRY(kt::api::check_struct_size<kt_roofline>(out->struct_size, "kt_measure_roofline: out"));
        KT_RETURN_IF(n_threads < 0 || n_threads > 4096, KT_STATUS_INVALID_ARGUMENT,
                     "kt_measure_roofline: n_threads %d is out of range [0, 4096]", n_threads);
        std::unique_ptr<kt::ThreadPool> pool;
        KT_TRY(kt::mem::create_pinned_pool(n_threads, "kt-roofline", &pool));
        kt::cpu::Roofline r;
        KT_TRY(kt::cpu::measure_roofline(*pool, buffer_bytes ? buffer_bytes : (uint64_t{1} << 30), &r));
        kt_roofline result = kt::api::zeroed_struct<kt_roofline>();
        result.n_threads = r.n_threads;
        result.buffer_bytes = r.buffer_bytes;
        result.read_bytes_per_s = r.read_bytes_per_s;
        result.int8_ops_per_s = r.int8_ops_per_s;
        std::strncpy(result.int8_isa, r.int8_isa.c_str(), sizeof result.int8_isa - 1);
        result.bf16_flops_per_s = r.bf16_flops_per_s;
        std::strncpy(result.bf16_isa, r.bf16_isa.c_str(), sizeof result.bf16_isa - 1);
        result.amx_int8_ops_per_s = r.amx_int8_ops_per_s;
        result.amx_bf16_flops_per_s = r.amx_bf16_flops_per_s;
        KT_TRY(kt::api::write_struct(result, out, "kt_measure_roofline: out"));
        return kt::Status::ok();
    });
    return s.code();
}

}  // extern "C"
