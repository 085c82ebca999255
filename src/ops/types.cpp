#include "ops/types.h"

#include <cctype>

namespace kt::ops {
namespace {

// Integer element types exist in GGUF (ggml uses them for indices); kt can describe them but only floats and
// block formats are dequantized.
constexpr TypeTraits kTypes[] = {
    {KT_TYPE_F32, "F32", 1, 4},
    {KT_TYPE_F16, "F16", 1, 2},
    {KT_TYPE_Q4_0, "Q4_0", 32, 18},
    {KT_TYPE_Q4_1, "Q4_1", 32, 20},
    {KT_TYPE_Q5_0, "Q5_0", 32, 22},
    {KT_TYPE_Q5_1, "Q5_1", 32, 24},
    {KT_TYPE_Q8_0, "Q8_0", 32, 34},
    {KT_TYPE_Q8_1, "Q8_1", 32, 36},
    {KT_TYPE_Q2_K, "Q2_K", 256, 84},
    {KT_TYPE_Q3_K, "Q3_K", 256, 110},
    {KT_TYPE_Q4_K, "Q4_K", 256, 144},
    {KT_TYPE_Q5_K, "Q5_K", 256, 176},
    {KT_TYPE_Q6_K, "Q6_K", 256, 210},
    {KT_TYPE_Q8_K, "Q8_K", 256, 292},
    {KT_TYPE_IQ4_NL, "IQ4_NL", 32, 18},
    {KT_TYPE_IQ4_XS, "IQ4_XS", 256, 136},
    {KT_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66},
    {KT_TYPE_IQ2_XS, "IQ2_XS", 256, 74},
    {KT_TYPE_IQ2_S, "IQ2_S", 256, 82},
    {KT_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98},
    {KT_TYPE_IQ3_S, "IQ3_S", 256, 110},
    {KT_TYPE_IQ1_S, "IQ1_S", 256, 50},
    {KT_TYPE_IQ1_M, "IQ1_M", 256, 56},
    {KT_TYPE_I8, "I8", 1, 1},
    {KT_TYPE_I16, "I16", 1, 2},
    {KT_TYPE_I32, "I32", 1, 4},
    {KT_TYPE_I64, "I64", 1, 8},
    {KT_TYPE_F64, "F64", 1, 8},
    {KT_TYPE_BF16, "BF16", 1, 2},
    {KT_TYPE_MXFP4, "MXFP4", 32, 17},
};

}  // namespace

const TypeTraits *type_traits(int32_t type) {
    for (const TypeTraits &t : kTypes)
        if (t.type == type) return &t;
    return nullptr;
}

const TypeTraits *type_traits_by_name(std::string_view name) {
    for (const TypeTraits &t : kTypes) {
        std::string_view candidate(t.name);
        if (candidate.size() != name.size()) continue;
        bool same = true;
        for (size_t i = 0; i < name.size() && same; ++i)
            same = std::toupper(static_cast<unsigned char>(name[i])) == candidate[i];
        if (same) return &t;
    }
    return nullptr;
}

}  // namespace kt::ops
