// The tile machine held against silicon: every record of shared/testdata/amx/tmul_vectors.bin (TMUL inputs and
// the outputs a real AMX CPU wrote; see that folder's README) replayed through one generated function per record,
// on the tile machine always, and natively on this CPU when it has AMX. Outputs must match bit for bit (NaN against
// NaN, payloads not compared: the README does not pin them).
#include <xbyak/xbyak.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "amx/amx_test_util.h"
#include "support/test_support.h"

using namespace kt;
using namespace Xbyak::util;

namespace {

enum Op : uint32_t { kTdpbf16ps = 0, kTdpbssd = 1, kTdpbsud = 2, kTdpbusd = 3, kTdpbuud = 4 };
const char *const kOpNames[] = {"tdpbf16ps", "tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud"};

struct Record {
    uint32_t op = 0, m = 0, n = 0, kb = 0;
    std::vector<uint8_t> c_in, a, b, c_out;  // [m][4n], [m][kb], [kb / 4][4n], [m][4n]
};

uint32_t read_u32(std::ifstream &in) {
    uint8_t b[4] = {};
    in.read(reinterpret_cast<char *>(b), 4);
    return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
           static_cast<uint32_t>(b[3]) << 24;
}

std::vector<uint8_t> read_bytes(std::ifstream &in, size_t n) {
    std::vector<uint8_t> v(n);
    in.read(reinterpret_cast<char *>(v.data()), static_cast<std::streamsize>(n));
    return v;
}

std::vector<Record> read_vectors() {
    const std::string path = test::testdata_path("amx/tmul_vectors.bin");
    std::ifstream in(path, std::ios::binary);
    INFO(path);
    REQUIRE(in.good());
    REQUIRE(read_u32(in) == 0x56584d41u);  // "AMXV"
    REQUIRE(read_u32(in) == 1u);
    const uint32_t count = read_u32(in);
    std::vector<Record> records(count);
    for (uint32_t i = 0; i < count; ++i) {
        Record &r = records[i];
        r.op = read_u32(in);
        r.m = read_u32(in);
        r.n = read_u32(in);
        r.kb = read_u32(in);
        INFO("record " << i);
        // The shapes one TMUL can have (palette 1): M <= 16 rows, N <= 16 dwords, K <= 64 bytes in steps of 4.
        REQUIRE(r.op <= kTdpbuud);
        REQUIRE((r.m >= 1 && r.m <= 16 && r.n >= 1 && r.n <= 16 && r.kb >= 4 && r.kb <= 64 && r.kb % 4 == 0));
        r.c_in = read_bytes(in, size_t{r.m} * r.n * 4);
        r.a = read_bytes(in, size_t{r.m} * r.kb);
        r.b = read_bytes(in, size_t{r.kb} / 4 * r.n * 4);
        r.c_out = read_bytes(in, size_t{r.m} * r.n * 4);
        REQUIRE(in.good());
    }
    in.peek();
    CHECK(in.eof());  // nothing after the last record
    return records;
}

// The LDTILECFG image for one record: C in tmm0 (M x 4N bytes), A in tmm1 (M x Kb), B in tmm2 (Kb / 4 x 4N).
struct alignas(64) Config {
    uint8_t bytes[64] = {};
    explicit Config(const Record &r) {
        bytes[0] = 1;
        auto tile = [&](int t, uint32_t rows, uint32_t colsb) {
            bytes[16 + 2 * t] = static_cast<uint8_t>(colsb);
            bytes[48 + t] = static_cast<uint8_t>(rows);
        };
        tile(0, r.m, 4 * r.n);
        tile(1, r.m, r.kb);
        tile(2, r.kb / 4, 4 * r.n);
    }
};

struct Io {
    const void *config;
    const void *a, *b;
    void *c;  // C_in on entry, C_out on return
    int64_t lda, ldb, ldc;
};

// void f(const Io *io): configure, load C, A and B, one TMUL, store C, release the tiles.
class TmulSnippet : public Xbyak::CodeGenerator {
public:
    explicit TmulSnippet(uint32_t op) : CodeGenerator(4096, Xbyak::DontSetProtectRWE) {
        mov(rax, ptr[rdi + offsetof(Io, config)]);
        ldtilecfg(ptr[rax]);
        mov(rax, ptr[rdi + offsetof(Io, c)]);
        mov(rcx, ptr[rdi + offsetof(Io, ldc)]);
        tileloadd(tmm0, ptr[rax + rcx]);
        mov(rax, ptr[rdi + offsetof(Io, a)]);
        mov(rcx, ptr[rdi + offsetof(Io, lda)]);
        tileloadd(tmm1, ptr[rax + rcx]);
        mov(rax, ptr[rdi + offsetof(Io, b)]);
        mov(rcx, ptr[rdi + offsetof(Io, ldb)]);
        tileloadd(tmm2, ptr[rax + rcx]);
        switch (op) {
            case kTdpbf16ps: tdpbf16ps(tmm0, tmm1, tmm2); break;
            case kTdpbssd: tdpbssd(tmm0, tmm1, tmm2); break;
            case kTdpbsud: tdpbsud(tmm0, tmm1, tmm2); break;
            case kTdpbusd: tdpbusd(tmm0, tmm1, tmm2); break;
            default: tdpbuud(tmm0, tmm1, tmm2); break;
        }
        mov(rax, ptr[rdi + offsetof(Io, c)]);
        mov(rcx, ptr[rdi + offsetof(Io, ldc)]);
        tilestored(ptr[rax + rcx], tmm0);
        tilerelease();
        ret();
    }
};

// Element i of C as the CPU wrote it equals ours: same bits, or both NaN for TDPBF16PS.
bool same_element(uint32_t op, const uint8_t *expect, const uint8_t *got) {
    if (std::memcmp(expect, got, 4) == 0) return true;
    if (op != kTdpbf16ps) return false;
    float e, g;
    std::memcpy(&e, expect, 4);
    std::memcpy(&g, got, 4);
    return std::isnan(e) && std::isnan(g);
}

// Replays every record on one runner; returns how many records matched in full.
int replay(const std::vector<Record> &records, bool native) {
    int matched = 0;
    for (size_t i = 0; i < records.size(); ++i) {
        const Record &r = records[i];
        INFO("record " << i << ": " << kOpNames[r.op] << " M " << r.m << " N " << r.n << " Kb " << r.kb << " on "
                       << (native ? "this CPU" : "the tile machine"));
        TmulSnippet code(r.op);
        const Config config(r);
        std::vector<uint8_t> c = r.c_in;
        const Io io{config.bytes, r.a.data(), r.b.data(), c.data(), r.kb, 4 * int64_t{r.n}, 4 * int64_t{r.n}};
        if (native) {
            code.setProtectModeRE();
            code.getCode<void (*)(const Io *)>()(&io);
        } else {
            test::TileMachine machine;
            const Status s = machine.call(code.getCode(), code.getSize(), reinterpret_cast<uint64_t>(&io));
            INFO(s.message());
            REQUIRE(s.is_ok());
        }
        int wrong = 0;
        for (size_t e = 0; e < c.size(); e += 4) wrong += !same_element(r.op, &r.c_out[e], &c[e]);
        CHECK(wrong == 0);
        matched += wrong == 0;
    }
    return matched;
}

}  // namespace

TEST_CASE("amx silicon vectors: the tile machine reproduces every TMUL output a real AMX CPU wrote", "[amx][golden]") {
    const std::vector<Record> records = read_vectors();
    REQUIRE(records.size() == 240);  // the README's count
    int per_op[5] = {};
    for (const Record &r : records) ++per_op[r.op];
    for (int op = 0; op < 5; ++op) CHECK(per_op[op] > 0);  // every instruction is covered
    CHECK(replay(records, false) == static_cast<int>(records.size()));
}

TEST_CASE("amx silicon vectors: this CPU's AMX reproduces them too", "[amx][golden]") {
    if (!test::host_has_amx()) {
        const std::string &why = cpu::host_cpu_features().amx_unusable_reason;
        WARN("native replay skipped: " << (why.empty() ? "this CPU has no AMX" : why));
        return;
    }
    const std::vector<Record> records = read_vectors();
    CHECK(replay(records, true) == static_cast<int>(records.size()));
    WARN("replayed all " << records.size() << " records natively on this CPU's AMX");
}
