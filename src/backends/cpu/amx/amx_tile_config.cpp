#include "backends/cpu/amx/amx_tile_config.h"

#include <functional>

#include "backends/cpu/jit/jit_generator.h"
#include "backends/cpu/jit/kernel_cache.h"

namespace kt::cpu::amx {
namespace {

TileConfig make_kt_palette() {
    TileConfig config;
    config.palette_id = 1;
    for (int t = 0; t < kNumTiles; ++t) {
        config.colsb[t] = kMaxTileColsb;
        config.rows[t] = kMaxTileRows;
    }
    return config;
}

TileConfig make_group_palette(int32_t group) {
    TileConfig config = make_kt_palette();
    for (int t = 0; t < 2; ++t) config.colsb[t] = static_cast<uint16_t>(group);
    for (int t = 2; t < 4; ++t) config.rows[t] = static_cast<uint8_t>(group / 4);
    return config;
}

class TileStubGenerator final : public jit::JitGenerator {
public:
    explicit TileStubGenerator(TileStub which) : JitGenerator(stub_name(which)), which_(which) {}

private:
    static const char *stub_name(TileStub which) {
        switch (which) {
            case TileStub::kLoadConfig: return "amx_ldtilecfg";
            case TileStub::kStoreConfig: return "amx_sttilecfg";
            case TileStub::kRelease: return "amx_tilerelease";
        }
        return "amx_stub";
    }

    void generate() override {
        switch (which_) {
            case TileStub::kLoadConfig: ldtilecfg(ptr[abi_param1]); break;
            case TileStub::kStoreConfig: sttilecfg(ptr[abi_param1]); break;
            case TileStub::kRelease: tilerelease(); break;
        }
        ret();
    }

    TileStub which_;
};

}  // namespace

const TileConfig &kt_palette() {
    static const TileConfig palette = make_kt_palette();
    return palette;
}

const TileConfig &group_palette(int32_t group) {
    static const TileConfig g16 = make_group_palette(16), g32 = make_group_palette(32);
    return group == 16 ? g16 : group == 32 ? g32 : kt_palette();
}

Status validate_tile_config(const TileConfig &c) {
    KT_RETURN_IF(c.palette_id > 1, KT_STATUS_INVALID_ARGUMENT, "tile config: palette %u (only 0 and 1 exist)",
                 c.palette_id);
    if (c.palette_id == 0) return Status::ok();
    for (int i = 0; i < 14; ++i)
        KT_RETURN_IF(c.reserved[i] != 0, KT_STATUS_INVALID_ARGUMENT, "tile config: reserved byte %d is %u", 2 + i,
                     c.reserved[i]);
    for (int t = 0; t < 16; ++t) {
        if (t >= kNumTiles) {
            KT_RETURN_IF(c.colsb[t] != 0 || c.rows[t] != 0, KT_STATUS_INVALID_ARGUMENT,
                         "tile config: tile %d does not exist in palette 1 but has %u rows x %u bytes", t, c.rows[t],
                         c.colsb[t]);
            continue;
        }
        KT_RETURN_IF(c.colsb[t] > kMaxTileColsb, KT_STATUS_INVALID_ARGUMENT, "tile config: tmm%d colsb %u > %d", t,
                     c.colsb[t], kMaxTileColsb);
        KT_RETURN_IF(c.rows[t] > kMaxTileRows, KT_STATUS_INVALID_ARGUMENT, "tile config: tmm%d rows %u > %d", t,
                     c.rows[t], kMaxTileRows);
        KT_RETURN_IF((c.rows[t] == 0) != (c.colsb[t] == 0), KT_STATUS_INVALID_ARGUMENT,
                     "tile config: tmm%d has %u rows but %u bytes per row", t, c.rows[t], c.colsb[t]);
    }
    return Status::ok();
}

Status tile_stub(TileStub which, const jit::JitCode **out) {
    static jit::KernelCache<TileStub, std::hash<TileStub>> cache;
    return cache.get(
        which,
        [](TileStub w, std::unique_ptr<jit::JitCode> *code) { return jit::build<TileStubGenerator>(code, w); },
        out);
}

}  // namespace kt::cpu::amx
