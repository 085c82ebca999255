// PackCache: the expert engine's packed weights of one GGUF file, kept in a file next to it (by default
// "<model>.ktpack") so that a later load maps them instead of repacking, and every process loading the model shares
// one copy of them in the page cache.
//
// File format (little-endian; every field checked on read, any mismatch refuses the whole file):
//   header, kHeaderBytes (one page), fields at the offsets of the kHdr* constants below:
//     magic "KTPACK\r\n", format version, header bytes, kt's version number, kt's git revision (NUL-padded), the
//     packed-layout version (backends/cpu/packed.h), the kernel set the buffers were packed for (name, ISA level),
//     the packing options that change bytes (target format, INT4 group), the source file's identity (size, mtime in
//     ns, data-section offset, hash of bytes [0, data offset): GGUF header, metadata and tensor infos, and hash of
//     kSourceSamples samples of kSampleBytes spread over the tensor data), the table's place and hash, the file's
//     total size, and last the hash of the header bytes before it.
//   table, right after the header: one kEntryBytes entry per packed buffer, in the order the loader asks for them:
//     tensor name (NUL-padded), part (linear / gate / up / down), NUMA shard and its first row of I, the packed
//     layout's type, group, super-block offset, n, k and bytes, the stride between experts, the expert count, the
//     buffer's offset in the file and the hash of its bytes.
//   buffers, each at a kBufferAlignment (page) boundary, in table order; the file ends with the last one.
// A cache is refused (logged with the reason, and the model repacked from its source) when it is missing,
// truncated, of another format, kt version, git revision, kernel set or packing options, when the source file's
// size, mtime, header or sampled bytes differ, or when any buffer's bytes do not hash to the table's value: all of
// it is read and hashed once while it is prefetched, so a corrupt cache never gives wrong weights.
//
// Writing is atomic: "<path>.tmp-<pid>", fsync, rename, fsync of the directory. A concurrent writer renames a whole
// file of its own; readers that mapped the previous one keep its inode. Failing to write is logged, never an error
// of the load.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "mem/mapped_file.h"
#include "model/gguf/gguf.h"
#include "moe/packed_store.h"

namespace kt::runtime {

// What packed bytes depend on besides their source: the header records it, a reader requires it equal.
struct PackCacheBuild {
    uint32_t kt_version = 0;       // KT_VERSION_NUMBER
    std::string git_revision;      // of the library that packed (packing code changes between commits)
    std::string kernel_set;        // the expert engine's kernel set name ("avx2", "avx512-vnni-bf16", "amx" ...)
    int32_t isa_level = 0;         // its cpu::IsaLevel
    int32_t target_format = 0;     // moe::TargetFormat the engine packs with
    int32_t int4_group = 0;        // INT4 group of that packing
};

class PackCache final : public moe::PackedStore {
public:
    // Called while a cache is read and checked: bytes done, bytes in all. Return false to cancel.
    using Progress = std::function<bool(uint64_t done, uint64_t total)>;

    // The file layout (see the top of this file).
    static constexpr char kMagic[8] = {'K', 'T', 'P', 'A', 'C', 'K', '\r', '\n'};
    static constexpr uint32_t kFormatVersion = 1;
    static constexpr uint64_t kHeaderBytes = 4096;
    static constexpr uint64_t kEntryBytes = 192;
    static constexpr uint64_t kBufferAlignment = 4096;
    static constexpr uint64_t kNameBytes = 96;
    static constexpr uint64_t kGitBytes = 48;
    static constexpr uint64_t kKernelSetBytes = 32;
    static constexpr int kSourceSamples = 64;
    static constexpr uint64_t kSampleBytes = 4096;
    // Header field offsets.
    static constexpr uint64_t kHdrMagic = 0, kHdrFormat = 8, kHdrHeaderBytes = 12, kHdrKtVersion = 16,
                              kHdrLayoutVersion = 20, kHdrGit = 24, kHdrKernelSet = 72, kHdrIsa = 104,
                              kHdrTargetFormat = 108, kHdrInt4Group = 112, kHdrReserved = 116, kHdrSourceSize = 120,
                              kHdrSourceMtime = 128, kHdrSourceDataOffset = 136, kHdrSourceHeaderHash = 144,
                              kHdrSourceSampleHash = 152, kHdrEntries = 160, kHdrTableOffset = 168,
                              kHdrTableBytes = 176, kHdrFileBytes = 184, kHdrTableHash = 192, kHdrHash = 200,
                              kHdrHashed = 200;  // the header hash covers bytes [0, kHdrHashed)
    // Entry field offsets.
    static constexpr uint64_t kEntName = 0, kEntPart = 96, kEntShard = 100, kEntShardBegin = 104, kEntType = 112,
                              kEntGroup = 116, kEntSbOffset = 120, kEntReserved = 124, kEntN = 128, kEntK = 136,
                              kEntLayoutBytes = 144, kEntStride = 152, kEntCount = 160, kEntOffset = 168,
                              kEntHash = 176, kEntReserved2 = 184;

    // The hash every check uses (64-bit, seeded; not cryptographic: it catches corruption and changed files, not
    // an adversary who can write the cache, who could as well write the model).
    static uint64_t hash(const uint8_t *data, uint64_t bytes, uint64_t seed = 0);

    // Opens the cache at `cache_path` for `source` (parsed from `source_path`). An existing file is checked
    // completely (header, table, the source's identity, every buffer's hash: the whole file is read once, with
    // progress); when it passes, reading() is true and the loader's buffers come from it. Otherwise refusal() says
    // why and the cache writes a new file at finish(). Only a cancelled progress callback is an error.
    static Status open(const std::string &cache_path, const std::string &source_path, const gguf::File &source,
                       const PackCacheBuild &build, const Progress &progress, std::shared_ptr<PackCache> *out);

    bool reading() const { return state_ == State::kReading; }
    const std::string &path() const { return path_; }
    const std::string &refusal() const { return refusal_; }  // "" when the file was used
    bool found() const { return found_; }                     // a file was there (used or refused)
    uint64_t file_bytes() const { return mapping_ ? mapping_->size() : 0; }
    // Whether tensor `name`'s packed bytes are in the cache being read (its pages in the model file need not be
    // prefetched).
    bool covers(std::string_view name) const { return reading() && covered_.count(std::string(name)) > 0; }

    bool take(const moe::PackedRequest *requests, size_t n) override;
    void keep(const char *name, const moe::PackedBufferDesc &desc, const mem::WeightStorage &buffer) override;

    // After the model's kernels are all built: writes the file when none was used (or the one used no longer
    // matched what the loader asked for), logging the outcome; afterwards take() and keep() do nothing. The
    // buffers handed to keep() / take() must still be alive.
    void finish();

    // Where the cache was written or why not (after finish(); "" before).
    const std::string &write_outcome() const { return write_outcome_; }

private:
    enum class State { kReading, kWriting, kStale, kDone };
    struct Entry {
        std::string name;
        moe::PackedBufferDesc desc;
        uint64_t offset = 0;
        uint64_t hash = 0;
    };
    struct Kept {
        std::string name;
        moe::PackedBufferDesc desc;
        const uint8_t *data = nullptr;
    };

    PackCache() = default;
    Status check(const gguf::File &source, const Progress &progress);
    Status write_file(std::string *written);

    State state_ = State::kWriting;
    std::string path_;
    PackCacheBuild build_;
    // The source's identity, as this load computed it.
    uint64_t source_size_ = 0, source_mtime_ns_ = 0, source_data_offset_ = 0, source_header_hash_ = 0,
             source_sample_hash_ = 0;
    std::string refusal_;
    bool found_ = false;
    std::shared_ptr<const mem::MappedFile> mapping_;
    std::vector<Entry> entries_;
    std::unordered_set<std::string> covered_;
    size_t next_ = 0;           // the next entry take() expects
    std::vector<Kept> kept_;    // every buffer of the model, in order, for writing
    std::string write_outcome_;
};

// The default cache path of a model file: "<model path>.ktpack".
std::string default_pack_cache_path(const std::string &model_path);

}  // namespace kt::runtime
