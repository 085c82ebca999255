// The type table against the block structs, and name lookups.
#include <catch2/catch.hpp>

#include "ops/ref/blocks.h"
#include "ops/types.h"

using namespace kt;

TEST_CASE("type table matches the block layouts") {
    struct Expect {
        int32_t type;
        int64_t block;
        size_t bytes;
    };
    const Expect expected[] = {
        {KT_TYPE_Q4_0, 32, sizeof(ref::BlockQ4_0)},   {KT_TYPE_Q4_1, 32, sizeof(ref::BlockQ4_1)},
        {KT_TYPE_Q5_0, 32, sizeof(ref::BlockQ5_0)},   {KT_TYPE_Q5_1, 32, sizeof(ref::BlockQ5_1)},
        {KT_TYPE_Q8_0, 32, sizeof(ref::BlockQ8_0)},   {KT_TYPE_Q8_1, 32, sizeof(ref::BlockQ8_1)},
        {KT_TYPE_Q2_K, 256, sizeof(ref::BlockQ2_K)},  {KT_TYPE_Q3_K, 256, sizeof(ref::BlockQ3_K)},
        {KT_TYPE_Q4_K, 256, sizeof(ref::BlockQ4_K)},  {KT_TYPE_Q5_K, 256, sizeof(ref::BlockQ5_K)},
        {KT_TYPE_Q6_K, 256, sizeof(ref::BlockQ6_K)},  {KT_TYPE_Q8_K, 256, sizeof(ref::BlockQ8_K)},
        {KT_TYPE_IQ4_NL, 32, sizeof(ref::BlockIq4Nl)}, {KT_TYPE_IQ4_XS, 256, sizeof(ref::BlockIq4Xs)},
        {KT_TYPE_MXFP4, 32, sizeof(ref::BlockMxfp4)},
        {KT_TYPE_IQ2_XXS, 256, sizeof(ref::BlockIq2Xxs)}, {KT_TYPE_IQ2_XS, 256, sizeof(ref::BlockIq2Xs)},
        {KT_TYPE_IQ2_S, 256, sizeof(ref::BlockIq2S)},     {KT_TYPE_IQ3_XXS, 256, sizeof(ref::BlockIq3Xxs)},
        {KT_TYPE_IQ3_S, 256, sizeof(ref::BlockIq3S)},     {KT_TYPE_IQ1_S, 256, sizeof(ref::BlockIq1S)},
        {KT_TYPE_IQ1_M, 256, sizeof(ref::BlockIq1M)},
        {KT_TYPE_F32, 1, 4}, {KT_TYPE_F16, 1, 2}, {KT_TYPE_BF16, 1, 2},
    };
    for (const Expect &e : expected) {
        const ops::TypeTraits *t = ops::type_traits(e.type);
        REQUIRE(t != nullptr);
        INFO(t->name);
        CHECK(t->block_size == e.block);
        CHECK(t->block_bytes == static_cast<int64_t>(e.bytes));
        CHECK(ops::type_traits_by_name(t->name) == t);
    }
    CHECK(ops::type_traits_by_name("q4_k") == ops::type_traits(KT_TYPE_Q4_K));
    CHECK(ops::type_traits(4) == nullptr);   // removed Q4_2
    CHECK(ops::type_traits(34) == nullptr);  // TQ1_0: not implemented
    CHECK(ops::type_traits(-1) == nullptr);
    CHECK(ops::type_traits_by_name("Q4_K_M") == nullptr);
}
