// kt-synth, kt-run and kt-bench as programs: what they write and print, checked through kt.h and against the
// golden logits, and their exit codes.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "kt.h"
#include "support/test_support.h"

namespace {

kt::test::ProgramRun run(const std::string &exe, const std::string &args) { return kt::test::run_program(exe + " " + args); }

// Tensor name -> type of a GGUF file.
std::map<std::string, int32_t> tensor_types(const std::string &path) {
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
    std::map<std::string, int32_t> types;
    for (int64_t i = 0; i < kt_model_tensor_count(m); ++i) {
        kt_tensor_info t;
        t.struct_size = sizeof t;
        REQUIRE(kt_model_tensor_info(m, i, &t) == KT_STATUS_OK);
        types[t.name] = t.type;
    }
    kt_model_free(m);
    return types;
}

// Loads a model and decodes a few tokens: the file is something kt runs.
void runs(const std::string &path) {
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
    kt_context_params p;
    kt_context_params_init(&p);
    p.n_ctx = 32;
    p.n_threads = 1;
    kt_context *ctx = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status s = kt_context_create(m, &p, &ctx, &err);
    INFO(err.message);
    REQUIRE(s == KT_STATUS_OK);
    const int32_t tokens[] = {1, 2, 3, 4, 5};
    CHECK(kt_context_decode(ctx, tokens, 5, KT_LOGITS_LAST) == KT_STATUS_OK);
    const float *logits = nullptr;
    REQUIRE(kt_context_logits(ctx, 0, &logits, nullptr) == KT_STATUS_OK);
    CHECK(std::isfinite(logits[0]));
    kt_context_free(ctx);
    kt_model_free(m);
}

std::vector<uint8_t> bytes_of(const std::string &path) { return kt::test::read_file(path); }

// The last token's logits after decoding `tokens` with the given kernels (KT_KERNELS_*), f32 KV cache.
std::vector<float> last_logits(kt_model *m, const std::vector<int32_t> &tokens, int32_t kernels) {
    kt_context_params p;
    kt_context_params_init(&p);
    p.n_ctx = 64;
    p.n_threads = 2;
    p.kernels = kernels;
    p.kv_type = KT_TYPE_F32;
    kt_context *ctx = nullptr;
    REQUIRE(kt_context_create(m, &p, &ctx, nullptr) == KT_STATUS_OK);
    REQUIRE(kt_context_decode(ctx, tokens.data(), static_cast<int32_t>(tokens.size()), KT_LOGITS_LAST) == KT_STATUS_OK);
    const float *logits = nullptr;
    REQUIRE(kt_context_logits(ctx, 0, &logits, nullptr) == KT_STATUS_OK);
    const std::vector<float> out(logits, logits + kt_context_n_vocab(ctx));
    kt_context_free(ctx);
    return out;
}

}  // namespace

TEST_CASE("kt-synth writes models of every architecture that kt runs") {
    kt::test::TempDir dir;
    const char *small = " --hidden 64 --heads 4 --heads-kv 2 --head-dim 16 --ff 96 --layers 2 --vocab 300";
    // deepseek2: MLA with a 32 + 16 query head, 64-wide latent, one dense layer, groups.
    const char *mla = " --hidden 64 --heads 4 --head-dim 48 --kv-lora 64 --rope-dims 16 --v-head 32 --ff 96"
                      " --expert-ff 32 --layers 3 --vocab 300 --shared-experts 1 --groups 4 --groups-used 2";
    for (const char *arch : {"llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "deepseek2"}) {
        for (const char *type : {"q4_k_m", "q8_0", "f16"}) {
            INFO(arch << " " << type);
            const std::string out = dir.file(std::string(arch) + "-" + type + ".gguf");
            const bool is_mla = std::string(arch) == "deepseek2";
            const kt::test::ProgramRun r = run(KT_SYNTH_EXE, "-o " + out + " --arch " + arch + " --type " + type + (is_mla ? mla : small));
            INFO(r.all());
            REQUIRE(r.exit_code == 0);
            runs(out);
        }
    }
    // Mixtral-style llama with experts.
    const std::string mixtral = dir.file("mixtral.gguf");
    REQUIRE(run(KT_SYNTH_EXE, "-o " + mixtral + " --arch llama --experts 4 --experts-used 2" + small).exit_code == 0);
    runs(mixtral);
    CHECK(tensor_types(mixtral).count("blk.1.ffn_down_exps.weight") == 1);
}

TEST_CASE("kt-synth presets of the 2026 MoE families run in kt-run and kt-bench, at any layer count") {
    kt::test::TempDir dir;
    // The released shapes cut down for CI (hidden, experts and vocabulary shrunk; each family's structure kept:
    // MLA dims, q LoRA or not, biases, q/k norms, NextN, sliding windows, YaRN, MXFP4 experts, legacy attn_kv_b).
    const std::string small = " --layers 2 --hidden 256 --expert-ff 64 --experts 16 --ff 128 --vocab 512 --heads 4";
    struct P {
        const char *preset, *extra;
    };
    for (const P &p : {P{"glm-4.5-air", " --heads-kv 2"}, P{"glm-4.6", " --heads-kv 2"}, P{"gpt-oss-20b", " --heads-kv 2"},
                       P{"gpt-oss-120b", " --heads-kv 2 --layers 3"}, P{"kimi-k2", ""}, P{"deepseek-v3", ""},
                       P{"deepseek-v2-lite", ""}, P{"deepseek-v3", " --legacy-kv-b"}, P{"deepseek-v2-lite", " --legacy-kv-b"}}) {
        INFO(p.preset << p.extra);
        const std::string out = dir.file(std::string(p.preset) + ".gguf");
        const kt::test::ProgramRun synth = run(KT_SYNTH_EXE, "-o " + out + " --preset " + p.preset + small + p.extra);
        INFO(synth.all());
        REQUIRE(synth.exit_code == 0);
        const auto types = tensor_types(out);
        if (std::string(p.preset).rfind("gpt-oss", 0) == 0) {  // as released: experts MXFP4, other matrices Q8_0
            CHECK(types.at("blk.1.ffn_down_exps.weight") == KT_TYPE_MXFP4);
            CHECK(types.at("blk.1.attn_q.weight") == KT_TYPE_Q8_0);
            CHECK(types.count("blk.1.attn_sinks.weight") == 1);
        }
        if (std::string(p.preset).rfind("glm", 0) == 0) CHECK(types.count("blk.1.attn_q.bias") == 1);
        CHECK(types.count("blk.1.attn_kv_b.weight") == (std::string(p.extra) == " --legacy-kv-b" ? 1u : 0u));
        const kt::test::ProgramRun gen = run(KT_RUN_EXE, "-m " + out + " --tokens 1,2,3,4,5 -n 6 -t 2");
        INFO(gen.all());
        CHECK(gen.exit_code == 0);
        CHECK(gen.all().find("generated: 6 tokens") != std::string::npos);
        const kt::test::ProgramRun bench = run(KT_BENCH_EXE, "-m " + out + " -p 8 -n 2 -r 1 -t 2 --roofline-mib 16");
        INFO(bench.all());
        CHECK(bench.exit_code == 0);
        CHECK(bench.all().find("bytes per token of context") != std::string::npos);
    }
}

TEST_CASE("kt-synth: the Q4_K_M mix, the seed, tied heads and bad arguments") {
    kt::test::TempDir dir;
    // A MoE model with 8 experts and 256-wide rows (K-quants fit): Q8_0 attn_k/attn_v, Q5_K attn_output, Q6_K head,
    // F32 norms and router, Q6_K ffn_down in the "more bits" layers (0 of 2 and 1 of 2 are both first/last eighth).
    const std::string a = dir.file("a.gguf"), b = dir.file("b.gguf"), c = dir.file("c.gguf"), t = dir.file("t.gguf");
    const std::string shape = " --arch qwen3moe --hidden 256 --heads 4 --heads-kv 2 --head-dim 64 --expert-ff 256"
                              " --experts 8 --experts-used 2 --layers 2 --vocab 300";
    REQUIRE(run(KT_SYNTH_EXE, "-o " + a + shape).exit_code == 0);
    const auto types = tensor_types(a);
    CHECK(types.at("blk.0.attn_q.weight") == KT_TYPE_Q4_K);
    CHECK(types.at("blk.0.attn_k.weight") == KT_TYPE_Q8_0);
    CHECK(types.at("blk.0.attn_v.weight") == KT_TYPE_Q8_0);
    CHECK(types.at("blk.0.attn_output.weight") == KT_TYPE_Q5_K);
    CHECK(types.at("blk.1.ffn_gate_exps.weight") == KT_TYPE_Q4_K);
    CHECK(types.at("blk.1.ffn_down_exps.weight") == KT_TYPE_Q6_K);
    CHECK(types.at("output.weight") == KT_TYPE_Q6_K);
    CHECK(types.at("token_embd.weight") == KT_TYPE_Q4_K);
    CHECK(types.at("blk.0.ffn_gate_inp.weight") == KT_TYPE_F32);
    CHECK(types.at("blk.0.attn_k_norm.weight") == KT_TYPE_F32);

    // Same seed, same bytes; another seed, other bytes.
    REQUIRE(run(KT_SYNTH_EXE, "-o " + b + shape).exit_code == 0);
    REQUIRE(run(KT_SYNTH_EXE, "-o " + c + shape + " --seed 2").exit_code == 0);
    CHECK(bytes_of(a) == bytes_of(b));
    CHECK(bytes_of(a) != bytes_of(c));

    // Tied: no output.weight, and the model still runs (the head is token_embd).
    REQUIRE(run(KT_SYNTH_EXE, "-o " + t + shape + " --tied --type q8_0").exit_code == 0);
    CHECK(tensor_types(t).count("output.weight") == 0);
    runs(t);

    // --vocab-from: a real vocabulary, so that text goes in and out.
    const std::string v = dir.file("v.gguf");
    REQUIRE(run(KT_SYNTH_EXE, "-o " + v + " --arch qwen3 --hidden 64 --heads 4 --heads-kv 2 --head-dim 16 --ff 96 "
                              "--layers 1 --vocab-from " + kt::test::testdata_path("tokenizer/llama3.gguf")).exit_code == 0);
    kt_model *vm = nullptr;
    REQUIRE(kt_model_load(v.c_str(), nullptr, &vm, nullptr) == KT_STATUS_OK);
    kt_vocab_info info;
    info.struct_size = sizeof info;
    REQUIRE(kt_vocab_get_info(vm, &info) == KT_STATUS_OK);
    CHECK(info.n_tokens > 100000);
    kt_model_free(vm);
    const kt::test::ProgramRun text = run(KT_RUN_EXE, "-m " + v + " -p 'Hello there' -n 8");
    CHECK(text.exit_code == 0);
    CHECK(text.out.rfind("Hello there", 0) == 0);  // the prompt is echoed, then the continuation

    CHECK(run(KT_SYNTH_EXE, "-o " + t + " --arch gptj").exit_code == 1);
    CHECK(run(KT_SYNTH_EXE, "-o " + t + " --type q9_9").exit_code == 2);
    CHECK(run(KT_SYNTH_EXE, "--arch qwen3").exit_code == 2);
}

TEST_CASE("kt-synth: rows a type cannot hold fall back as llama-quantize's do, and the model runs on them") {
    // Experts 160 wide (as DeepSeek-V2-Lite's 1,408, not a multiple of 256): ffn_down's rows are 160 long, so the
    // K-quants and IQ4_XS take llama-quantize's fallbacks there, which kt computes as stored; the other matrices
    // (rows of 256) keep the type.
    kt::test::TempDir dir;
    const std::string shape = " --arch qwen3moe --hidden 256 --heads 4 --heads-kv 2 --head-dim 64 --expert-ff 160"
                              " --experts 8 --experts-used 2 --layers 1 --vocab 300";
    const struct {
        const char *type;
        int32_t kept, fallback;
    } cases[] = {{"q4_k", KT_TYPE_Q4_K, KT_TYPE_Q5_0},
                 {"q5_k", KT_TYPE_Q5_K, KT_TYPE_Q5_1},
                 {"q6_k", KT_TYPE_Q6_K, KT_TYPE_Q8_0},
                 {"q2_k", KT_TYPE_Q2_K, KT_TYPE_IQ4_NL},
                 {"iq4_xs", KT_TYPE_IQ4_XS, KT_TYPE_IQ4_NL},
                 // The grid formats (random rows, kept as IQ_GRID3).
                 {"iq2_xxs", KT_TYPE_IQ2_XXS, KT_TYPE_IQ4_NL},
                 {"iq1_m", KT_TYPE_IQ1_M, KT_TYPE_IQ4_NL}};
    for (const auto &c : cases) {
        INFO("--type " << c.type);
        const std::string path = dir.file(std::string(c.type) + ".gguf");
        REQUIRE(run(KT_SYNTH_EXE, "-o " + path + shape + " --type " + c.type).exit_code == 0);
        const auto types = tensor_types(path);
        CHECK(types.at("blk.0.ffn_gate_exps.weight") == c.kept);
        CHECK(types.at("blk.0.ffn_down_exps.weight") == c.fallback);
        runs(path);
    }
}

TEST_CASE("the grid formats: a model in each computes as its exact dequantization does, and maps from a pack cache") {
    // A dense model (the expert pool test covers experts in these formats; a random MoE's routing flips on small
    // differences, which would make this comparison chaotic). Every matrix in the grid format (token_embd, attention,
    // the FFN and the head): KT_KERNELS_AUTO packs them as IQ_GRID3 or IQ_GRID (exact) and computes with int8
    // activations, KT_KERNELS_REFERENCE computes in f32 on the exact dequantization, which kt_golden_quants checks
    // against llama.cpp's. This checks that every matrix of such a file takes the packing and that nothing on the way
    // (row lengths, scales, code books) is lost. Observed 0.015-0.020 over one token sequence (0.015-0.025 when they
    // became Q8_0), as for Q8_0, Q6_K and Q5_0 files of the same shape (0.016-0.019); bound 0.05.
    kt::test::TempDir dir;
    const std::string shape = " --arch qwen3 --hidden 256 --heads 4 --heads-kv 2 --head-dim 64 --ff 512 --layers 2"
                              " --vocab 512";
    const std::vector<int32_t> tokens = {5, 17, 200, 3, 99, 42, 7, 300};
    for (const char *type : {"iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s"}) {
        INFO("--type " << type);
        const std::string path = dir.file(std::string(type) + ".gguf");
        REQUIRE(run(KT_SYNTH_EXE, "-o " + path + shape + " --type " + type).exit_code == 0);
        kt_model *m = nullptr;
        REQUIRE(kt_model_load(path.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
        const std::vector<float> exact = last_logits(m, tokens, KT_KERNELS_REFERENCE);
        const std::vector<float> fast = last_logits(m, tokens, KT_KERNELS_AUTO);
        kt_model_free(m);
        double diff = 0, norm = 0;
        for (size_t i = 0; i < exact.size(); ++i) {
            diff += (fast[i] - exact[i]) * static_cast<double>(fast[i] - exact[i]);
            norm += exact[i] * static_cast<double>(exact[i]);
        }
        const double rel = std::sqrt(diff / norm);
        INFO("||auto - reference|| / ||reference|| = " << rel);
        CHECK(rel < 0.05);

        // The packed matrices (each with its code book) written to a pack cache and mapped back: the same logits.
        const std::string prompt = " --tokens 5,17,200 -n 1 -t 2 --logits ";
        const std::string plain = dir.file(std::string(type) + ".f32"), cached = plain + ".cached";
        REQUIRE(run(KT_RUN_EXE, "-m " + path + prompt + plain).exit_code == 0);
        for (int pass = 0; pass < 2; ++pass) {  // the first writes the cache, the second maps it
            const kt::test::ProgramRun r = run(KT_RUN_EXE, "-v -m " + path + " --pack-cache" + prompt + cached);
            INFO(r.all());
            REQUIRE(r.exit_code == 0);
            CHECK(r.all().find(pass == 0 ? "written" : ": used") != std::string::npos);
            CHECK(bytes_of(cached) == bytes_of(plain));
        }
    }
}

TEST_CASE("kt-run's --logits matches llama.cpp's golden logits, generation works, exit codes are right") {
    kt::test::TempDir dir;
    // seq0 of the qwen3moe golden reference: 8 tokens.
    kt_model *ref = nullptr;
    REQUIRE(kt_model_load(kt::test::testdata_path("models/qwen3moe.f32.ref.gguf").c_str(), nullptr, &ref, nullptr) ==
            KT_STATUS_OK);
    int64_t index = -1;
    REQUIRE(kt_model_tensor_find(ref, "seq0.tokens", &index) == KT_STATUS_OK);
    std::vector<float> ids(8), expected(8 * 512);
    REQUIRE(kt_model_tensor_read_f32(ref, index, ids.data(), ids.size(), nullptr) == KT_STATUS_OK);
    REQUIRE(kt_model_tensor_find(ref, "seq0.logits", &index) == KT_STATUS_OK);
    REQUIRE(kt_model_tensor_read_f32(ref, index, expected.data(), expected.size(), nullptr) == KT_STATUS_OK);
    kt_model_free(ref);
    std::string list;
    for (float f : ids) list += (list.empty() ? "" : ",") + std::to_string(static_cast<int>(f));

    const std::string model = kt::test::testdata_path("models/qwen3moe.f32.gguf");
    const std::string logits = dir.file("logits.f32");
    const kt::test::ProgramRun r = run(KT_RUN_EXE, "-m " + model + " --tokens " + list + " -n 6 -t 1 --kv-type f32 --kernels reference --ids --logits " + logits);
    INFO(r.all());
    REQUIRE(r.exit_code == 0);
    const std::vector<uint8_t> raw = bytes_of(logits);
    REQUIRE(raw.size() == expected.size() * sizeof(float));
    double diff = 0, scale = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
        float v;
        std::memcpy(&v, raw.data() + i * sizeof(float), sizeof v);
        diff = std::max(diff, std::fabs(static_cast<double>(v) - expected[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(expected[i])));
    }
    CHECK(diff / scale < 1e-4);  // tier A
    // Six generated ids on the first line, then the timing lines.
    const std::string first_line = r.all().substr(0, r.all().find('\n'));
    CHECK(std::count(first_line.begin(), first_line.end(), ' ') == 5);
    CHECK(r.all().find("tokens/s") != std::string::npos);

    // A text prompt goes through the model's tokenizer: its logits equal those of the ids kt_tokenize gives.
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(model.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
    const std::string text = "hello world";
    std::vector<int32_t> ids_of_text(64);
    int64_t n_ids = 0;
    REQUIRE(kt_tokenize(m, text.c_str(), text.size(), 1, 1, ids_of_text.data(), 64, &n_ids) == KT_STATUS_OK);
    kt_model_free(m);
    std::string id_list;
    for (int64_t i = 0; i < n_ids; ++i) id_list += (i ? "," : "") + std::to_string(ids_of_text[static_cast<size_t>(i)]);
    const std::string from_text = dir.file("text.f32"), from_ids = dir.file("ids.f32");
    REQUIRE(run(KT_RUN_EXE, "-m " + model + " -p '" + text + "' -n 3 -t 1 --logits " + from_text).exit_code == 0);
    REQUIRE(run(KT_RUN_EXE, "-m " + model + " --tokens " + id_list + " -n 0 -t 1 --logits " + from_ids).exit_code == 0);
    CHECK(bytes_of(from_text) == bytes_of(from_ids));
    CHECK(bytes_of(from_text).size() == static_cast<size_t>(n_ids) * 512 * sizeof(float));

    CHECK(run(KT_RUN_EXE, "-m " + model).exit_code == 2);                               // no prompt
    CHECK(run(KT_RUN_EXE, "-m " + model + " -p hi --tokens 1").exit_code == 2);         // two prompts
    CHECK(run(KT_RUN_EXE, "-m " + model + " --tokens 1,x").exit_code == 2);            // bad ids
    CHECK(run(KT_RUN_EXE, "-m " + dir.file("missing.gguf") + " --tokens 1").exit_code == 1);
    CHECK(run(KT_RUN_EXE, "-m " + model + " --tokens 1,99999").exit_code == 1);        // outside the vocabulary
    // A prompt longer than the context: said so, in those terms, and no statistics for work that did not run.
    std::string long_prompt = "1";
    for (int i = 0; i < 40; ++i) long_prompt += ",1";
    const kt::test::ProgramRun too_long = run(KT_RUN_EXE, "-m " + model + " --tokens " + long_prompt + " -c 32 -n 4 -t 1");
    INFO(too_long.all());
    CHECK(too_long.exit_code == 1);
    CHECK(too_long.all().find("41 tokens, the context holds 32") != std::string::npos);
    CHECK(too_long.all().find("tokens/s") == std::string::npos);
    CHECK(too_long.all().find("generated") == std::string::npos);
    // Prefill only (-n 0): the prompt's line, no generation line.
    const kt::test::ProgramRun prefill_only = run(KT_RUN_EXE, "-m " + model + " --tokens 1,2,3 -n 0 -t 1");
    CHECK(prefill_only.exit_code == 0);
    CHECK(prefill_only.all().find("prompt: 3 tokens") != std::string::npos);
    CHECK(prefill_only.all().find("generated") == std::string::npos);
    const kt::test::ProgramRun sampled = run(KT_RUN_EXE, "-m " + model + " --tokens 1,2 -n 4 --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.02"
                                        " --repeat-penalty 1.1 --presence-penalty 0.2 -s 5");
    CHECK(sampled.exit_code == 0);
}

TEST_CASE("kt-run -v names where the kernels prefetch, KT_PREFETCH's choices give the same logits, typos are warned") {
    kt::test::TempDir dir;
    const std::string model = kt::test::testdata_path("models/qwen3moe.q4_k_m.gguf");
    // One prompt token: every K-quant matrix, experts included, runs as a one-row call, the decode stream whose
    // prefetches KT_PREFETCH places (l1nta: non-temporal).
    const std::string args = " -v -m " + model + " --tokens 5 -n 4 -t 2 --ids --logits ";
    auto first_line = [](const std::string &text) { return text.substr(0, text.find('\n')); };
    std::vector<uint8_t> logits_l1;
    std::string ids_l1;
    for (const std::string choice : {"l1", "l1nta", "l2"}) {
        const std::string logits = dir.file(choice + ".f32");
        const kt::test::ProgramRun r = kt::test::run_program("KT_PREFETCH=" + choice + " " + KT_RUN_EXE + args + logits);
        INFO(r.all());
        REQUIRE(r.exit_code == 0);
        // The target is named where the engine's kernels have AVX-512 code (an AVX2 host's have none).
        const bool avx512 = r.all().find("expert engine (avx512") != std::string::npos ||
                            r.all().find("expert engine (amx") != std::string::npos;
        if (avx512) CHECK(r.all().find("prefetch " + choice + ")") != std::string::npos);
        CHECK(r.all().find("ignored") == std::string::npos);
        // A prefetch hint moves no result: the prompt's logits and the generated ids are those of every choice.
        if (choice == "l1") {
            logits_l1 = bytes_of(logits);
            ids_l1 = first_line(r.out);
            CHECK(logits_l1.size() == 512 * sizeof(float));
        } else {
            CHECK(bytes_of(logits) == logits_l1);
            CHECK(first_line(r.out) == ids_l1);
        }
    }
    // Values kt does not understand: a warning that names each, and the defaults (same results).
    const kt::test::ProgramRun typo =
        kt::test::run_program(std::string("KT_PREFETCH=L3 KT_MAX_ISA=avx-2 ") + KT_RUN_EXE + args + dir.file("typo.f32"));
    INFO(typo.all());
    REQUIRE(typo.exit_code == 0);
    CHECK(typo.all().find("KT_PREFETCH=L3 is not l1, l1nta or l2: ignored") != std::string::npos);
    CHECK(typo.all().find("KT_MAX_ISA=avx-2 is not scalar, avx2, avx512 or amx: ignored") != std::string::npos);
    CHECK(bytes_of(dir.file("typo.f32")) == logits_l1);
    CHECK(first_line(typo.out) == ids_l1);
}

TEST_CASE("kt-bench prints llama-bench's table with the roofline, and csv and json") {
    const std::string model = kt::test::testdata_path("models/qwen3moe.q8_0.gguf");
    const std::string common = "-m " + model + " -p 16 -n 4 -r 2 -t 1 --roofline-mib 16";
    kt::test::ProgramRun md = run(KT_BENCH_EXE, common);
    INFO(md.all());
    REQUIRE(md.exit_code == 0);
    CHECK(md.all().find("| model ") != std::string::npos);
    CHECK(md.all().find("| qwen3moe ?B Q8_0") != std::string::npos);
    CHECK(md.all().find("pp16") != std::string::npos);
    CHECK(md.all().find("tg4") != std::string::npos);
    // The bound's bandwidth is the larger of the probes just before and just after each test.
    const size_t probe = md.all().find("roofline with 1 threads: read ");
    REQUIRE(probe != std::string::npos);
    double read = 0, read_before = 0, read_after = 0;
    REQUIRE(std::sscanf(md.all().c_str() + probe, "roofline with 1 threads: read %lf GB/s (before %lf, after %lf;", &read,
                        &read_before, &read_after) == 3);
    CHECK(read_before > 0);
    CHECK(read_after > 0);
    CHECK(read == std::max(read_before, read_after));
    CHECK(md.all().find("load average") != std::string::npos);
    CHECK(md.all().find("| attention |") != std::string::npos);
    // The weights read per token, by part: this model's layers all have routed experts, so their FFN tensors are
    // the experts' part and none is a dense FFN's; the parts add up to the total.
    const std::string text = md.all();
    const size_t line = text.find("qwen3moe.q8_0.gguf: ");
    REQUIRE(line != std::string::npos);
    double total = 0, file_total = 0, attention = 0, experts = 0, dense = 0, head = 0, other = 0;
    REQUIRE(std::sscanf(text.c_str() + line + std::strlen("qwen3moe.q8_0.gguf: "),
                        "%lf MB read per generated token as the kernels hold the weights (file: %lf MB; attention %lf, "
                        "experts %lf, dense ffn %lf, head %lf, other %lf;",
                        &total, &file_total, &attention, &experts, &dense, &head, &other) == 7);
    // Q8_0 is kept as stored: packed, its blocks take the file's 34 bytes per 32 values, but rows pad to 32-row
    // panels: each router (f32, 8 rows, 8 KB in the file) becomes a bf16 panel of 32 rows, 16 KB.
    CHECK(total > file_total);
    CHECK(total < 1.2 * file_total);
    CHECK(attention > 0);
    CHECK(experts > 0);
    CHECK(dense == 0);
    CHECK(head > 0);
    CHECK(other > 0);
    CHECK(attention + experts + dense + head + other == Approx(total).epsilon(0.002));
    // The head's part is the output projection as the kernels hold it and its norm, read whole each token.
    double output_bytes = 0;
    {
        kt_model *m = nullptr;
        REQUIRE(kt_model_load(model.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
        for (int64_t i = 0; i < kt_model_tensor_count(m); ++i) {
            kt_tensor_info t;
            t.struct_size = sizeof t;
            REQUIRE(kt_model_tensor_info(m, i, &t) == KT_STATUS_OK);
            uint64_t packed = 0;
            if (std::string(t.name) == "output_norm.weight") output_bytes += static_cast<double>(t.n_bytes);
            if (std::string(t.name) == "output.weight") {
                REQUIRE(kt_packed_matrix_bytes(t.type, t.ne[1], t.ne[0], &packed) == KT_STATUS_OK);
                output_bytes += static_cast<double>(packed);
            }
        }
        kt_model_free(m);
    }
    REQUIRE(output_bytes > 0);
    CHECK(head == Approx(output_bytes / 1e6).epsilon(0.001));
    const size_t rates = text.find("weights read per second by part");
    REQUIRE(rates != std::string::npos);
    CHECK(text.find("| tg4 ", rates) != std::string::npos);
    CHECK(text.find("| pp16 ", rates) == std::string::npos);  // a prompt reads each weight once per batch, not per token

    kt::test::ProgramRun csv = run(KT_BENCH_EXE, common + " -o csv");
    REQUIRE(csv.exit_code == 0);
    CHECK(csv.all().find("avg_ts,stddev_ts") != std::string::npos);
    CHECK(csv.all().find("bound_fraction") != std::string::npos);
    kt::test::ProgramRun json = run(KT_BENCH_EXE, common + " -o json -pg 8,2");
    REQUIRE(json.exit_code == 0);
    CHECK(json.all().find("\"test\": \"pp8+tg2\"") != std::string::npos);
    // A generation test carries its read rates by part; a test with a prompt has none (0). The first result of
    // each run: tg2 alone, then pp16 (the prompts come first).
    auto first_step_rate = [](const std::string &out) {
        double rate = -1;
        const size_t at = out.find("\"step_read_bytes_per_s\": ");
        if (at != std::string::npos) std::sscanf(out.c_str() + at, "\"step_read_bytes_per_s\": %lf", &rate);
        return rate;
    };
    kt::test::ProgramRun gen_json = run(KT_BENCH_EXE, "-m " + model + " -p 0 -n 2 -r 1 -t 1 --roofline-mib 16 -o json");
    REQUIRE(gen_json.exit_code == 0);
    CHECK(first_step_rate(gen_json.all()) > 0);
    CHECK(first_step_rate(json.all()) == 0);
    CHECK(run(KT_BENCH_EXE, "-m " + model + " -o xml").exit_code == 2);
}
