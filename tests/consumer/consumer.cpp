// A C++17 program built against an installed kt: an expert pool (kt's CPU MoE engine, as a host engine would use
// it) on random BF16-exact weights, checked against the MoE FFN computed here in double. Exits non-zero when kt
// fails or the results disagree.
#include <kt.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

namespace {

struct PoolFree {
    void operator()(kt_expert_pool *p) const { kt_expert_pool_free(p); }
};

double silu(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace

int main() {
    constexpr int E = 4, H = 64, I = 32, T = 3, K = 2;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<float> gate(E * I * H), up(E * I * H), down(E * H * I), x(T * H);
    for (auto *v : {&gate, &up, &down, &x})
        for (float &f : *v) f = normal(rng);

    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    p.n_experts = E;
    p.hidden_size = H;
    p.intermediate_size = I;
    p.weight_format = KT_EXPERT_WEIGHTS_BF16;
    p.n_threads = 2;
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_expert_pool *raw = nullptr;
    if (kt_expert_pool_create(&p, &raw, &err) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt_expert_pool_create: %s\n", err.message);
        return 1;
    }
    std::unique_ptr<kt_expert_pool, PoolFree> pool(raw);
    const kt_expert_weights w = {sizeof w, KT_TYPE_F32, KT_TYPE_F32, KT_TYPE_F32, gate.data(), up.data(), down.data()};
    if (kt_expert_pool_load(pool.get(), &w) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt_expert_pool_load: %s\n", kt_expert_pool_last_error(pool.get()));
        return 1;
    }
    const std::vector<int32_t> ids = {0, 3, 2, -1, 1, 2};
    const std::vector<float> weights = {0.7f, 0.3f, 1.0f, 0.0f, 0.4f, 0.6f};
    std::vector<float> y(T * H);
    kt_expert_forward f;
    kt_expert_forward_init(&f);
    f.n_tokens = T;
    f.top_k = K;
    f.input = x.data();
    f.expert_ids = ids.data();
    f.expert_weights = weights.data();
    f.output = y.data();
    if (kt_expert_pool_forward(pool.get(), &f) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt_expert_pool_forward: %s\n", kt_expert_pool_last_error(pool.get()));
        return 1;
    }

    // out[t] = sum_k w[t][k] * down_e(silu(gate_e x[t]) * up_e x[t]) in double.
    double worst = 0, scale = 0;
    for (int t = 0; t < T; ++t) {
        std::vector<double> ref(H, 0.0);
        for (int k = 0; k < K; ++k) {
            const int e = ids[t * K + k];
            if (e < 0) continue;
            std::vector<double> h(I);
            for (int i = 0; i < I; ++i) {
                double g = 0, u = 0;
                for (int j = 0; j < H; ++j) {
                    g += double(gate[(e * I + i) * H + j]) * x[t * H + j];
                    u += double(up[(e * I + i) * H + j]) * x[t * H + j];
                }
                h[i] = silu(g) * u;
            }
            for (int j = 0; j < H; ++j) {
                double d = 0;
                for (int i = 0; i < I; ++i) d += double(down[(e * H + j) * I + i]) * h[i];
                ref[j] += weights[t * K + k] * d;
            }
        }
        for (int j = 0; j < H; ++j) {
            worst = std::fmax(worst, std::fabs(ref[j] - y[t * H + j]));
            scale = std::fmax(scale, std::fabs(ref[j]));
        }
    }
    // BF16 weights and activations: a relative error of a few 2^-8 at most.
    std::printf("expert pool vs double reference: max |diff| %.3g of max |out| %.3g\n", worst, scale);
    return worst <= 0.02 * scale ? 0 : 1;
}
