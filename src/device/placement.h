// Placement: which experts of each MoE layer live on the device, under its memory budget.
//
// Per layer, the hottest experts by activation count (counts kt recorded while running: a calibration prompt, or
// counts gathered while serving; see ops::ExpertFfn::activation_counts), or - with no counts - every expert equally
// hot, ties going to the lower id. How many per layer: exactly `experts_per_layer` when given (an error when a
// layer has fewer experts, or when they do not fit), else the largest count that fits in every layer, then one more
// expert per layer, layer by layer, while that still fits. Bytes are exact: device::expert_bytes per expert plus
// the non-expert part (the device's shared work buffer, every dense FFN and shared expert, and, with a prefill
// threshold, the stream buffer that holds one layer's experts for long prompts), which must fit first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kt::device {

struct PlacementLayer {
    int64_t layer = 0;  // the model's layer index
    int64_t n_experts = 0, hidden = 0, intermediate = 0;
};

struct PlacementRequest {
    uint64_t budget_bytes = 0;
    int64_t experts_per_layer = 0;  // > 0: exactly this many per layer; 0: as many as fit
    uint64_t non_expert_bytes = 0;  // what the device holds besides experts (its work buffer, the stream buffer)
    uint64_t stream_bytes = 0;      // of non_expert_bytes, the stream buffer (runtime/hybrid_ffn.h's StreamBuffer)
    uint64_t dense_bytes = 0;       // of non_expert_bytes, the dense FFNs and shared experts (n_dense of them)
    int64_t n_dense = 0;
    // counts[i][e]: activations of expert e of layers[i]; empty (or an empty row): no counts for that layer.
    std::vector<std::vector<uint64_t>> counts;
};

struct LayerPlacement {
    int64_t layer = 0;
    int64_t n_experts = 0;
    std::vector<int32_t> experts;  // on the device, ascending
    uint64_t bytes = 0;            // their exact device bytes
};

struct Plan {
    uint64_t budget_bytes = 0, non_expert_bytes = 0, expert_bytes = 0;  // expert_bytes: all layers
    uint64_t stream_bytes = 0, dense_bytes = 0;  // of non_expert_bytes
    int64_t n_dense = 0;                         // dense FFNs and shared experts on the device
    bool by_counts = false;
    std::vector<LayerPlacement> layers;
    uint64_t used_bytes() const { return non_expert_bytes + expert_bytes; }
    const LayerPlacement *find(int64_t layer) const;
    // One header line, then one line per layer: "layer 3: 4/64 experts [1 5 9 12], 12582912 bytes".
    std::string to_string() const;
};

Status plan_placement(const std::vector<PlacementLayer> &layers, const PlacementRequest &request, Plan *out);

}  // namespace kt::device
