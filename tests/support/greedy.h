// Greedy generation through kt.h, for tests and fuzz targets that only need "the next n tokens".
#pragma once

#include <cstdint>

#include "kt.h"

namespace kt::test {

// Continues `ctx` from what it holds by up to n greedy tokens into out[0, n); *produced (may be NULL) gets the
// count.
inline kt_status generate_greedy(kt_context *ctx, int32_t *out, int64_t n, int64_t *produced) {
    kt_sampler_params sampler;
    kt_sampler_params_init(&sampler);
    sampler.temperature = 0.0f;
    kt_generate_params gp;
    kt_generate_params_init(&gp);
    gp.max_tokens = n;
    gp.sampler = &sampler;
    int64_t count = 0;
    const kt_status s = kt_context_generate(ctx, nullptr, 0, &gp, out, n, &count, nullptr);
    if (produced) *produced = count;
    return s;
}

}  // namespace kt::test
