// The attention kernel compiled for the avx2 level (see attention_impl.h).
#include "backends/cpu/attention_impl.h"

namespace kt::cpu::detail {

void attend_avx2(const AttentionArgs &args) { attention_impl::attend(args); }

}  // namespace kt::cpu::detail
