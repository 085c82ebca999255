// The architectures kt runs, one per file in this folder; find_architecture (arch.cpp) lists them explicitly.
#pragma once

#include "model/arch/arch.h"

namespace kt::model {

extern const Architecture kLlama;     // llama.cpp
extern const Architecture kQwen2;     // qwen2.cpp
extern const Architecture kQwen3;     // qwen3.cpp
extern const Architecture kQwen2Moe;  // qwen2moe.cpp
extern const Architecture kQwen3Moe;  // qwen3moe.cpp
extern const Architecture kDeepseek2; // deepseek2.cpp
extern const Architecture kGlm4Moe;   // glm4moe.cpp
extern const Architecture kGptOss;    // gpt_oss.cpp

// The LLaMA graph (llama.cpp), shared by qwen2, qwen3 and qwen3moe: dense SwiGLU FFN, or softmax top-k experts
// renormalised.
Status llama_forward(const Model &m, const Batch &b, ForwardHost &host);

}  // namespace kt::model
