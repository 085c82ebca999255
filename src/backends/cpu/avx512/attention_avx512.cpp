// The attention kernel compiled for the avx512 level (see attention_impl.h).
#include "backends/cpu/attention_impl.h"

namespace kt::cpu::detail {

void attend_avx512(const AttentionArgs &args) { attention_impl::attend(args); }

}  // namespace kt::cpu::detail
