// Writes the golden files of this folder with llama.cpp's own ggml (libggml-base.so), not with kt: see README.md.
// Build and run (the library comes from the npm package @node-llama-cpp/linux-x64, which ships llama.cpp's CPU
// build):
//   g++ -O1 -o gen gen_iq_golden.cpp -L$LIB -lggml-base -Wl,-rpath,$LIB && ./gen OUTDIR
// Only ggml's public C functions are declared here; every byte of the files is ggml's.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
struct ggml_context;
struct ggml_tensor;
struct gguf_context;
struct ggml_init_params { size_t mem_size; void *mem_buffer; bool no_alloc; };
struct ggml_type_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    void (*to_float)(const void *x, float *y, int64_t k);
    void (*from_float_ref)(const float *x, void *y, int64_t k);
};
ggml_context *ggml_init(ggml_init_params params);
void ggml_free(ggml_context *ctx);
ggml_tensor *ggml_new_tensor_2d(ggml_context *ctx, int type, int64_t ne0, int64_t ne1);
ggml_tensor *ggml_new_tensor_3d(ggml_context *ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2);
ggml_tensor *ggml_set_name(ggml_tensor *tensor, const char *name);
void *ggml_get_data(const ggml_tensor *tensor);
const ggml_type_traits *ggml_get_type_traits(int type);
size_t ggml_quantize_chunk(int type, const float *src, void *dst, int64_t start, int64_t nrows, int64_t n_per_row,
                           const float *imatrix);
size_t ggml_row_size(int type, int64_t ne);
gguf_context *gguf_init_empty(void);
void gguf_free(gguf_context *ctx);
void gguf_set_val_str(gguf_context *ctx, const char *key, const char *val);
void gguf_set_val_u32(gguf_context *ctx, const char *key, uint32_t val);
void gguf_add_tensor(gguf_context *ctx, const ggml_tensor *tensor);
bool gguf_write_to_file(const gguf_context *ctx, const char *fname, bool only_meta);
}

namespace {

constexpr int kF32 = 0;
constexpr uint32_t kSeed = 20261206;

struct Type { const char *name; int id; };
constexpr Type kTypes[] = {{"IQ2_XXS", 16}, {"IQ2_XS", 17}, {"IQ3_XXS", 18}, {"IQ1_S", 19},
                           {"IQ3_S", 21},   {"IQ2_S", 22},  {"IQ1_M", 29}};

struct Rng {  // splitmix64
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
    double normal() { return std::sqrt(-2.0 * std::log(1.0 - uniform())) * std::cos(6.283185307179586 * uniform()); }
};

// A random f16 bit pattern of a normal number in [2^-10, 2^4), either sign.
uint16_t random_scale_f16(Rng &rng) {
    const uint16_t exponent = static_cast<uint16_t>(5 + rng.next() % 14);
    return static_cast<uint16_t>(((rng.next() & 1) << 15) | (exponent << 10) | (rng.next() & 0x3FF));
}

struct Writer {
    gguf_context *gguf;
    ggml_context *ctx;
    int type;
    Rng rng;

    ggml_tensor *add(const std::string &name, int t, int64_t ne0, int64_t ne1, int64_t ne2) {
        ggml_tensor *x = ne2 > 1 ? ggml_new_tensor_3d(ctx, t, ne0, ne1, ne2) : ggml_new_tensor_2d(ctx, t, ne0, ne1);
        ggml_set_name(x, name.c_str());
        gguf_add_tensor(gguf, x);
        return x;
    }

    // tN (quantized by ggml from src), tN.f32 (ggml's dequantization of tN), tN.src.
    void quantized(int n, const std::vector<float> &src, int64_t ne0, int64_t ne1, int64_t ne2) {
        const std::string name = "t" + std::to_string(n);
        const int64_t rows = ne1 * ne2;
        std::vector<float> imatrix(ne0);  // a smooth, uneven weighting: the types that need one are given one
        for (int64_t j = 0; j < ne0; ++j) imatrix[j] = 1.0f + 0.5f * std::sin(0.37f * j);
        ggml_tensor *q = add(name, type, ne0, ne1, ne2);
        ggml_quantize_chunk(type, src.data(), ggml_get_data(q), 0, rows, ne0, imatrix.data());
        dequantized(name, q, ne0, ne1, ne2);
        std::memcpy(ggml_get_data(add(name + ".src", kF32, ne0, ne1, ne2)), src.data(), src.size() * 4);
    }

    // tN of random bytes: every grid index, sign pattern and scale code the bits can hold, with a sane f16 scale.
    void random_bits(int n, int64_t ne0, int64_t ne1) {
        const std::string name = "t" + std::to_string(n);
        ggml_tensor *q = add(name, type, ne0, ne1, 1);
        uint8_t *bytes = static_cast<uint8_t *>(ggml_get_data(q));
        const size_t block_bytes = ggml_get_type_traits(type)->type_size;
        const size_t blocks = ggml_row_size(type, ne0) * ne1 / block_bytes;
        for (size_t b = 0; b < blocks; ++b) {
            uint8_t *block = bytes + b * block_bytes;
            for (size_t i = 0; i < block_bytes; ++i) block[i] = static_cast<uint8_t>(rng.next());
            const uint16_t d = random_scale_f16(rng);
            if (type == 29) {  // IQ1_M: the f16 scale is the top nibbles of the four uint16 scale words (bytes 48..55)
                for (int k = 0; k < 4; ++k) block[48 + 2 * k + 1] = (block[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4);
            } else {
                std::memcpy(block, &d, 2);
            }
        }
        dequantized(name, q, ne0, ne1, 1);
    }

    void dequantized(const std::string &name, ggml_tensor *q, int64_t ne0, int64_t ne1, int64_t ne2) {
        ggml_tensor *f = add(name + ".f32", kF32, ne0, ne1, ne2);
        const size_t row = ggml_row_size(type, ne0);
        for (int64_t r = 0; r < ne1 * ne2; ++r)
            ggml_get_type_traits(type)->to_float(static_cast<uint8_t *>(ggml_get_data(q)) + r * row,
                                                 static_cast<float *>(ggml_get_data(f)) + r * ne0, ne0);
    }
};

std::vector<float> normal_rows(Rng &rng, int64_t ne0, const std::vector<double> &row_scales) {
    std::vector<float> v;
    for (double s : row_scales)
        for (int64_t j = 0; j < ne0; ++j) v.push_back(static_cast<float>(rng.normal() * s));
    return v;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    for (size_t ti = 0; ti < sizeof kTypes / sizeof kTypes[0]; ++ti) {
        const Type &type = kTypes[ti];
        ggml_init_params params = {64u << 20, nullptr, false};
        Writer w{gguf_init_empty(), ggml_init(params), type.id, Rng{(uint64_t(kSeed) << 8) | ti}};
        gguf_set_val_str(w.gguf, "general.architecture", "quant-golden");
        gguf_set_val_str(w.gguf, "golden.generator", "llama.cpp ggml (libggml-base.so of npm @node-llama-cpp/linux-x64 3.22.1): ggml_quantize_chunk, to_float");
        gguf_set_val_str(w.gguf, "golden.type", type.name);
        gguf_set_val_u32(w.gguf, "golden.seed", kSeed);
        gguf_set_val_str(w.gguf, "golden.rule", "dequantizing tN must give tN.f32 bit for bit");

        // t0: [256, 6] N(0,1) rows at scales 1, 1 (with an outlier), 0 (all zeros), 1e-6, 0.01, 100.
        std::vector<float> t0 = normal_rows(w.rng, 256, {1, 1, 0, 1e-6, 0.01, 100});
        t0[256 + 77] = 40.0f;
        w.quantized(0, t0, 256, 6, 1);
        // t1: [1024, 3] N(0,1) with a scale 10^U(-3,2) per 32 values; U(-1,1) with an outlier; |N(0,1)| + 0.5.
        std::vector<float> t1(3 * 1024);
        for (int j = 0; j < 1024; j += 32) {
            const double s = std::pow(10.0, -3.0 + 5.0 * w.rng.uniform());
            for (int k = 0; k < 32; ++k) t1[j + k] = static_cast<float>(w.rng.normal() * s);
        }
        for (int j = 0; j < 1024; ++j) t1[1024 + j] = static_cast<float>(2 * w.rng.uniform() - 1);
        t1[1024 + 500] = -25.0f;
        for (int j = 0; j < 1024; ++j) t1[2048 + j] = static_cast<float>(std::fabs(w.rng.normal()) + 0.5);
        w.quantized(1, t1, 1024, 3, 1);
        // t2: [256, 4, 2] expert-like, rows scaled 0.02, 0.5, 1, 7, 0.1, 2, 30, 0.001.
        w.quantized(2, normal_rows(w.rng, 256, {0.02, 0.5, 1, 7, 0.1, 2, 30, 0.001}), 256, 4, 2);
        // t3: [512, 2] N(0,1) and Laplace(0,1) * 3 (heavy tails).
        std::vector<float> t3 = normal_rows(w.rng, 512, {1});
        for (int j = 0; j < 512; ++j) {
            const double u = w.rng.uniform() - 0.5;
            t3.push_back(static_cast<float>(-3.0 * (u < 0 ? -1 : 1) * std::log(1 - 2 * std::fabs(u))));
        }
        w.quantized(3, t3, 512, 2, 1);
        // t4: [4096, 8] random bits (256 blocks).
        w.random_bits(4, 4096, 8);

        const std::string path = std::string(argv[1]) + "/" + type.name + ".gguf";
        if (!gguf_write_to_file(w.gguf, path.c_str(), false)) {
            std::fprintf(stderr, "cannot write %s\n", path.c_str());
            return 1;
        }
        gguf_free(w.gguf);
        ggml_free(w.ctx);
        std::printf("%s\n", path.c_str());
    }
    return 0;
}
