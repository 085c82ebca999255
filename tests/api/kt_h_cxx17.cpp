// kt.h from C++17: the header must not need C++20, and extern "C" must give C linkage.
#include "kt.h"

#include <cstdio>
#include <type_traits>

static_assert(std::is_same_v<kt_status, int32_t>);
static_assert(std::is_standard_layout_v<kt_model_params> && std::is_trivial_v<kt_model_params>);
static_assert(std::is_standard_layout_v<kt_tensor_info> && std::is_trivial_v<kt_tensor_info>);

int main() {
    std::printf("kt %s, status 4 = %s\n", kt_version_string(), kt_status_string(KT_STATUS_INVALID_FILE));
    return kt_version_number() == KT_VERSION_NUMBER ? 0 : 1;
}
