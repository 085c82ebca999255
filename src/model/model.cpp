// Model loading: bind every tensor of the architecture's table, check it, build its kernels.
#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace kt::model {
namespace {

std::string shape_text(const int64_t *ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// The loader's TensorTable: looks each part up, checks shape and type, dequantizes vectors and builds kernels.
// Problems are collected while the family's table is walked (it cannot return early) and reported by finish():
// every missing tensor by name, or the first other error.
class Binder final : public TensorTable {
public:
    Binder(const gguf::File &file, const ops::KernelFactory &kernels, const std::string &arch,
           const Model::Progress &progress)
        : file_(file), kernels_(kernels), arch_(arch), progress_(progress) {
        for (const gguf::TensorInfo &t : file_.tensors()) total_bytes_ += t.n_bytes;
    }

    void embedding(const std::string &name, int64_t n_embd, int64_t n_vocab, Embedding &slot) override {
        const gguf::TensorInfo *t = bind(name + ".weight", kRequired, {n_embd, n_vocab});
        if (t && !ref::can_dequantize(t->type)) fail(unsupported_type(*t));
        slot.tensor = t;
    }

    void vector_tensor(const std::string &tensor_name, int64_t n, uint32_t need, Vector &slot) override {
        bind_vector(tensor_name, n, need, slot);
    }

    void linear(const std::string &name, int64_t in, int64_t out, uint32_t need, Projection &slot) override {
        const gguf::TensorInfo *t = bind(name + ".weight", need | ((need & kTiedToEmbedding) ? kOptional : 0u), {in, out});
        if (!t && (need & kTiedToEmbedding)) t = bind("token_embd.weight", kRequired, {in, out});
        if (!t) return;
        slot.weight = t;
        if (need & (kBias | kOptionalBias)) bind_vector(name + ".bias", out, (need & kBias) ? kRequired : kOptional, slot.bias);
        if (!ok()) return;
        keep(kernels_.make_linear(matrix(*t), slot.bias.data(), &slot.linear));
        built(t->n_bytes);
    }

    void ffn(const std::string &prefix, const std::string &suffix, int64_t n_embd, int64_t n_ff, int64_t n_expert,
             uint32_t need, const ops::ExpertOptions &variant, Ffn &slot) override {
        std::vector<int64_t> in_shape = {n_embd, n_ff}, out_shape = {n_ff, n_embd};
        if (n_expert > 0) {
            in_shape.push_back(n_expert);
            out_shape.push_back(n_expert);
        }
        const std::string gate = prefix + "_gate" + suffix, up = prefix + "_up" + suffix, down = prefix + "_down" + suffix;
        slot.gate = bind(gate + ".weight", need, in_shape);
        slot.up = bind(up + ".weight", need, in_shape);
        slot.down = bind(down + ".weight", need, out_shape);
        ops::ExpertOptions options = variant;
        if (need & kBias) {  // {I, X}, {I, X}, {E, X}: one bias row per expert
            const int64_t count = std::max<int64_t>(n_expert, 1);
            bind_rows(gate + ".bias", {n_ff, count}, kRequired, slot.gate_bias);
            bind_rows(up + ".bias", {n_ff, count}, kRequired, slot.up_bias);
            bind_rows(down + ".bias", {n_embd, count}, kRequired, slot.down_bias);
            options.gate_bias = slot.gate_bias.data();
            options.up_bias = slot.up_bias.data();
            options.down_bias = slot.down_bias.data();
        }
        if (!slot.gate || !slot.up || !slot.down || !ok()) return;
        keep(kernels_.make_experts(stack_of(*slot.gate), stack_of(*slot.up), stack_of(*slot.down), options,
                                   &slot.experts));
        built(slot.gate->n_bytes + slot.up->n_bytes + slot.down->n_bytes);
    }

    void stack(const std::string &name, int64_t in, int64_t out, int64_t count, uint32_t need, Stack &slot) override {
        const gguf::TensorInfo *t = bind(name + ".weight", need, {in, out, count});
        if (!t || !ok()) return;
        slot.tensor = t;
        const ops::MatrixStack s = stack_of(*t);
        slot.linears.resize(static_cast<size_t>(count));
        for (int64_t i = 0; i < count && ok(); ++i) keep(kernels_.make_linear(s.at(i), nullptr, &slot.linears[static_cast<size_t>(i)]));
        built(t->n_bytes);
    }

    void split_kv_b(const std::string &name, int64_t kv_lora, int64_t qk_nope, int64_t v_head, int64_t n_head,
                    Stack &k_b, Stack &v_b) override {
        const gguf::TensorInfo *t = bind(name + ".weight", kRequired, {kv_lora, n_head * (qk_nope + v_head)});
        if (!t || !ok()) return;
        k_b.tensor = v_b.tensor = t;
        const ops::MatrixView kv = matrix(*t);
        // k_b[h] {qk_nope -> kv_lora}: the transpose of head h's key rows, in the source's element type when that
        // is a plain float type (exact), else in F32 from the exact dequantization.
        const bool plain = t->type == KT_TYPE_F32 || t->type == KT_TYPE_F16 || t->type == KT_TYPE_BF16;
        const int32_t k_type = plain ? t->type : KT_TYPE_F32;
        const size_t elem = k_type == KT_TYPE_F32 ? 4 : 2;
        k_b.owned.resize(static_cast<size_t>(n_head * kv_lora * qk_nope) * elem);
        std::vector<float> row(static_cast<size_t>(kv_lora));
        for (int64_t h = 0; h < n_head; ++h) {
            uint8_t *dst = k_b.owned.data() + static_cast<size_t>(h * kv_lora * qk_nope) * elem;
            for (int64_t j = 0; j < qk_nope; ++j) {
                const uint8_t *src = kv.data + (h * (qk_nope + v_head) + j) * kv.row_bytes;
                if (!plain) ref::dequantize_row(t->type, src, row.data(), kv_lora);
                for (int64_t i = 0; i < kv_lora; ++i) {  // element (i, j) of the key rows -> row i, column j
                    const uint8_t *from = plain ? src + static_cast<size_t>(i) * elem : reinterpret_cast<const uint8_t *>(&row[i]);
                    std::memcpy(dst + static_cast<size_t>(i * qk_nope + j) * elem, from, elem);
                }
            }
        }
        ops::MatrixView k = kv;
        k.type = k_type;
        k.cols = qk_nope;
        k.rows = kv_lora;
        k.row_bytes = qk_nope * static_cast<int64_t>(elem);
        ops::MatrixView v = kv;
        v.rows = v_head;
        k_b.linears.resize(static_cast<size_t>(n_head));
        v_b.linears.resize(static_cast<size_t>(n_head));
        for (int64_t h = 0; h < n_head && ok(); ++h) {
            k.data = k_b.owned.data() + static_cast<size_t>(h * kv_lora * qk_nope) * elem;
            v.data = kv.data + (h * (qk_nope + v_head) + qk_nope) * kv.row_bytes;  // head h's value rows, in place
            keep(kernels_.make_linear(k, nullptr, &k_b.linears[static_cast<size_t>(h)]));
            keep(kernels_.make_linear(v, nullptr, &v_b.linears[static_cast<size_t>(h)]));
        }
        built(t->n_bytes);
    }

    void skip(const std::string &prefix) override { skipped_.push_back(prefix); }

    // The first problem met, or OK when every tensor was found, checked and built and none was left over.
    Status finish(uint64_t *weight_bytes) {
        if (!missing_.empty()) {
            std::string list;
            for (size_t i = 0; i < missing_.size() && i < 8; ++i) list += (i ? ", " : "") + missing_[i];
            if (missing_.size() > 8) list += ", ...";
            return Status::error(KT_STATUS_INVALID_FILE, "%s: %zu required tensor%s missing: %s", arch_.c_str(),
                                 missing_.size(), missing_.size() == 1 ? " is" : "s are", list.c_str());
        }
        KT_TRY(Status(first_error_));
        *weight_bytes = 0;
        for (const gguf::TensorInfo &t : file_.tensors()) {
            if (skipped(t.name)) continue;
            KT_RETURN_IF(!used_.count(t.name), KT_STATUS_UNSUPPORTED,
                         "tensor '%s' is not part of architecture %s as kt runs it (a variant kt does not support?)",
                         t.name.data(), arch_.c_str());
            *weight_bytes += t.n_bytes;
        }
        return Status::ok();
    }

private:
    bool ok() const { return missing_.empty() && first_error_.is_ok(); }
    bool skipped(std::string_view name) const {
        for (const std::string &prefix : skipped_)
            if (name.substr(0, prefix.size()) == prefix) return true;
        return false;
    }
    void fail(Status s) {
        if (first_error_.is_ok()) first_error_ = std::move(s);
    }
    void keep(Status s) {
        if (!s.is_ok()) fail(std::move(s));
    }
    // Reports a kernel built from `bytes` of the file; the caller's refusal stops the binding.
    void built(uint64_t bytes) {
        done_bytes_ += bytes;
        if (ok() && progress_ && !progress_(done_bytes_, total_bytes_))
            fail(Status(KT_STATUS_CANCELLED, "loading cancelled"));  // finish() names the file
    }

    Status unsupported_type(const gguf::TensorInfo &t) const {
        return Status::error(KT_STATUS_UNSUPPORTED, "tensor '%s' has type %s, which kt cannot compute with",
                             t.name.data(), kt_type_name(t.type));
    }

    // Finds `name`, checks its shape against `shape` (remaining dims must be 1); null when absent or wrong.
    const gguf::TensorInfo *bind(const std::string &name, uint32_t need, const std::vector<int64_t> &shape) {
        const gguf::TensorInfo *t = file_.find_tensor(name);
        if (!t) {
            if (!(need & kOptional)) missing_.push_back(name);
            return nullptr;
        }
        used_.insert(t->name);
        int64_t want[gguf::kMaxDims] = {1, 1, 1, 1};
        for (size_t i = 0; i < shape.size(); ++i) want[i] = shape[i];
        for (int d = 0; d < gguf::kMaxDims; ++d) {
            if (t->ne[d] == want[d]) continue;
            fail(Status::error(KT_STATUS_INVALID_FILE, "tensor '%s' has shape %s but %s expects %s", name.c_str(),
                               shape_text(t->ne, t->n_dims).c_str(), arch_.c_str(),
                               shape_text(want, static_cast<int>(shape.size())).c_str()));
            return nullptr;
        }
        return t;
    }

    void bind_vector(const std::string &name, int64_t n, uint32_t need, Vector &slot) {
        bind_rows(name, std::vector<int64_t>{n}, need, slot);
    }
    // A vector of several rows (per-expert biases): every element, dequantized row by row.
    void bind_rows(const std::string &name, const std::vector<int64_t> &shape, uint32_t need, Vector &slot) {
        const gguf::TensorInfo *t = bind(name, need, shape);
        if (!t) return;
        if (!ref::can_dequantize(t->type)) return fail(unsupported_type(*t));
        slot.tensor = t;
        int64_t rows = 1;
        for (size_t d = 1; d < shape.size(); ++d) rows *= shape[d];
        const int64_t n = shape[0], row_bytes = ops::row_bytes(*ops::type_traits(t->type), n);
        slot.values.resize(static_cast<size_t>(n * rows));
        for (int64_t r = 0; r < rows; ++r) ref::dequantize_row(t->type, t->data + r * row_bytes, slot.values.data() + r * n, n);
    }

    ops::MatrixView matrix(const gguf::TensorInfo &t) const {
        ops::MatrixView m;
        m.type = t.type;
        m.data = t.data;
        m.cols = t.ne[0];
        m.rows = t.ne[1];
        m.row_bytes = ops::row_bytes(*ops::type_traits(t.type), t.ne[0]);
        m.name = t.name.data();
        m.mapping = &file_.bytes();
        return m;
    }

    ops::MatrixStack stack_of(const gguf::TensorInfo &t) const {
        ops::MatrixStack s;
        s.first = matrix(t);
        s.count = t.ne[2];
        s.stride = s.first.row_bytes * s.first.rows;
        return s;
    }

    const gguf::File &file_;
    const ops::KernelFactory &kernels_;
    const std::string &arch_;
    std::vector<std::string> missing_;
    Status first_error_;
    std::set<std::string_view> used_;
    std::vector<std::string> skipped_;  // name prefixes of tensors the architecture does not compute
    const Model::Progress &progress_;
    uint64_t done_bytes_ = 0, total_bytes_ = 0;
};

// The planner's TensorTable: records what the architecture asks for.
class Recorder final : public TensorTable {
public:
    explicit Recorder(std::vector<TensorSpec> *out) : out_(out) {}

    void embedding(const std::string &name, int64_t n_embd, int64_t n_vocab, Embedding &) override {
        add(name + ".weight", {n_embd, n_vocab}, TensorSpec::Role::kEmbedding, false);
    }
    void vector_tensor(const std::string &tensor_name, int64_t n, uint32_t need, Vector &) override {
        add(tensor_name, {n}, TensorSpec::Role::kVector, need & kOptional);
    }
    void linear(const std::string &name, int64_t in, int64_t out, uint32_t need, Projection &) override {
        add(name + ".weight", {in, out}, TensorSpec::Role::kMatrix, need & (kOptional | kTiedToEmbedding));
        if (need & (kBias | kOptionalBias)) add(name + ".bias", {out}, TensorSpec::Role::kVector, !(need & kBias));
    }
    void ffn(const std::string &prefix, const std::string &suffix, int64_t n_embd, int64_t n_ff, int64_t n_expert,
             uint32_t need, const ops::ExpertOptions &, Ffn &) override {
        const TensorSpec::Role role = n_expert > 0 ? TensorSpec::Role::kExperts : TensorSpec::Role::kMatrix;
        std::vector<int64_t> in = {n_embd, n_ff}, out = {n_ff, n_embd};
        if (n_expert > 0) {
            in.push_back(n_expert);
            out.push_back(n_expert);
        }
        for (const char *part : {"_gate", "_up", "_down"}) {
            add(prefix + part + suffix + ".weight", part[1] == 'd' ? out : in, role, need & kOptional);
            if (!(need & kBias)) continue;
            std::vector<int64_t> bias = {part[1] == 'd' ? n_embd : n_ff};
            if (n_expert > 0) bias.push_back(n_expert);
            add(prefix + part + suffix + ".bias", bias, TensorSpec::Role::kVector, false);
        }
    }
    void stack(const std::string &name, int64_t in, int64_t out, int64_t count, uint32_t need, Stack &) override {
        add(name + ".weight", {in, out, count}, TensorSpec::Role::kExperts, need & kOptional);
    }
    void split_kv_b(const std::string &name, int64_t kv_lora, int64_t qk_nope, int64_t v_head, int64_t n_head, Stack &,
                    Stack &) override {
        add(name + ".weight", {kv_lora, n_head * (qk_nope + v_head)}, TensorSpec::Role::kMatrix, false);
    }
    void skip(const std::string &) override {}

private:
    void add(std::string name, std::vector<int64_t> ne, TensorSpec::Role role, bool optional) {
        out_->push_back(TensorSpec{std::move(name), std::move(ne), role, optional});
    }
    std::vector<TensorSpec> *out_;
};

// The architecture and hyperparameters of a file.
Status read_architecture(const gguf::File &file, const Architecture **arch, HParams *hp) {
    std::string_view arch_name;
    KT_RETURN_IF(!file.find("general.architecture"), KT_STATUS_INVALID_FILE,
                 "%s: metadata key 'general.architecture' is missing", file.source_name().c_str());
    KT_TRY(file.get_string("general.architecture", &arch_name));
    hp->arch = std::string(arch_name);
    *arch = find_architecture(hp->arch);
    KT_RETURN_IF(!*arch, KT_STATUS_UNSUPPORTED, "%s: architecture '%s' is not supported (kt runs: %s)",
                 file.source_name().c_str(), hp->arch.c_str(), known_architectures().c_str());
    return Status((*arch)->read_hparams(file, hp)).with_context(file.source_name());
}

}  // namespace

Status list_tensors(const gguf::File &file, std::vector<TensorSpec> *out) {
    const Architecture *arch = nullptr;
    HParams hp;
    KT_TRY(read_architecture(file, &arch, &hp));
    Weights w;
    w.layers.resize(static_cast<size_t>(hp.n_layer));
    out->clear();
    Recorder recorder(out);
    arch->for_each_tensor(hp, w, recorder);
    return Status::ok();
}

Status Model::load(const gguf::File &file, const ops::KernelFactory &kernels, std::unique_ptr<Model> *out,
                   const Progress &progress) {
    auto m = std::make_unique<Model>();
    m->file = &file;
    m->kernels = &kernels;
    KT_TRY(read_architecture(file, &m->arch, &m->hp));

    m->w.layers.resize(static_cast<size_t>(m->hp.n_layer));
    Binder binder(file, kernels, m->hp.arch, progress);
    m->arch->for_each_tensor(m->hp, m->w, binder);
    KT_TRY(binder.finish(&m->weight_bytes).with_context(file.source_name()));
    *out = std::move(m);
    return Status::ok();
}

}  // namespace kt::model
