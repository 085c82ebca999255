#include "runtime/pack_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cerrno>
#include <cstring>

#include "backends/cpu/packed.h"
#include "core/log.h"

namespace kt::runtime {
namespace {

// ------------------------------------------------------------------------------------------------------------
// Little-endian fields

uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
// A NUL-padded string field of `bytes`: the string must leave at least one NUL.
bool get_str(const uint8_t *p, uint64_t bytes, std::string *out) {
    const void *nul = std::memchr(p, 0, bytes);
    if (!nul) return false;
    out->assign(reinterpret_cast<const char *>(p), static_cast<const uint8_t *>(nul) - p);
    for (const uint8_t *q = static_cast<const uint8_t *>(nul); q < p + bytes; ++q)
        if (*q) return false;  // padding must be zero: nothing hides after the string
    return true;
}
bool put_str(uint8_t *p, uint64_t bytes, const std::string &s) {
    if (s.size() >= bytes) return false;
    std::memcpy(p, s.data(), s.size());
    return true;
}

uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// ------------------------------------------------------------------------------------------------------------
// Hashing: four independent 64-bit lanes over 32-byte blocks (multiply, rotate, multiply), merged and mixed at the
// end with the length. Several GB/s per core, so checking a cache costs little more than faulting its pages in.

constexpr uint64_t kMulA = 0x9fb21c651e98df25ull;
constexpr uint64_t kMulB = 0xc2b2ae3d27d4eb4full;
constexpr uint64_t kMulC = 0x165667b19e3779f9ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;  // x86-64 is little-endian
}
inline uint64_t mix(uint64_t h) {
    h ^= h >> 31;
    h *= kMulA;
    h ^= h >> 29;
    h *= kMulB;
    h ^= h >> 32;
    return h;
}

// PackCache::hash fed in parts: blocks() any number of times with whole 32-byte blocks, then finish() once with
// the rest. The same bytes give the same hash however they are cut, so a piece can be hashed as it is read.
class StreamingHash {
public:
    explicit StreamingHash(uint64_t seed) : v_{seed + kMulA + kMulB, seed + kMulB, seed, seed - kMulA} {}
    void blocks(const uint8_t *data, uint64_t bytes) {  // bytes: a multiple of 32
        for (uint64_t i = 0; i < bytes; i += 32)
            for (int lane = 0; lane < 4; ++lane) v_[lane] = rotl(v_[lane] + load64(data + i + 8 * lane) * kMulB, 31) * kMulA;
        bytes_ += bytes;
    }
    uint64_t finish(const uint8_t *tail, uint64_t n) const {  // n < 32
        uint64_t h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18) + (bytes_ + n) * kMulC;
        uint64_t i = 0;
        for (; i + 8 <= n; i += 8) h = rotl(h ^ (load64(tail + i) * kMulB), 27) * kMulA + kMulC;
        for (; i < n; ++i) h = rotl(h ^ (tail[i] * kMulC), 11) * kMulA;
        return mix(h);
    }

private:
    uint64_t v_[4];
    uint64_t bytes_ = 0;
};

// Identity of the source file: its tensor data sampled at kSourceSamples places (read with pread, so that the
// model's own mapping is not touched), and the hash of those bytes.
Status sample_source(const std::string &path, uint64_t data_offset, uint64_t size, uint64_t *out) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::error(KT_STATUS_IO_ERROR, "%s: cannot open: %s", path.c_str(), std::strerror(errno));
    std::vector<uint8_t> buf(PackCache::kSampleBytes);
    uint64_t h = PackCache::hash(nullptr, 0, size);
    const uint64_t span = size > data_offset ? size - data_offset : 0;
    auto sample_at = [&](int i) {
        // Samples at i / kSourceSamples of the data, the last one ending at the file's end.
        if (i == PackCache::kSourceSamples) return size > PackCache::kSampleBytes ? size - PackCache::kSampleBytes : 0;
        return data_offset + span / PackCache::kSourceSamples * static_cast<uint64_t>(i);
    };
    // All asked for at once: on a cold page cache the reads then overlap instead of waiting on the disk one by one.
    for (int i = 0; i <= PackCache::kSourceSamples && span > 0; ++i)
        (void)posix_fadvise(fd, static_cast<off_t>(sample_at(i)), static_cast<off_t>(PackCache::kSampleBytes),
                            POSIX_FADV_WILLNEED);
    Status s;
    for (int i = 0; i <= PackCache::kSourceSamples && span > 0; ++i) {
        const uint64_t at = sample_at(i);
        const uint64_t want = std::min<uint64_t>(PackCache::kSampleBytes, size - at);
        uint64_t got = 0;
        while (got < want) {
            const ssize_t n = pread(fd, buf.data() + got, want - got, static_cast<off_t>(at + got));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                s = Status::error(KT_STATUS_IO_ERROR, "%s: cannot read at %llu", path.c_str(),
                                  static_cast<unsigned long long>(at + got));
                break;
            }
            got += static_cast<uint64_t>(n);
        }
        if (!s.is_ok()) break;
        h = PackCache::hash(buf.data(), want, h);
    }
    ::close(fd);
    *out = h;
    return s;
}

bool same_desc(const moe::PackedBufferDesc &a, const moe::PackedBufferDesc &b) {
    return a.part == b.part && a.shard == b.shard && a.shard_begin == b.shard_begin && a.layout.type == b.layout.type &&
           a.layout.group == b.layout.group && a.layout.superblock_k_offset == b.layout.superblock_k_offset &&
           a.layout.n == b.layout.n && a.layout.k == b.layout.k && a.layout.bytes == b.layout.bytes &&
           a.stride == b.stride && a.count == b.count;
}

const char *part_name(int32_t part) {
    switch (part) {
        case moe::PackedBufferDesc::kLinear: return "linear";
        case moe::PackedBufferDesc::kGate: return "gate";
        case moe::PackedBufferDesc::kUp: return "up";
        case moe::PackedBufferDesc::kDown: return "down";
        default: return "?";
    }
}

// Buffers are hashed in pieces of this size, each piece by itself (seeded with its index), and a buffer's hash is
// the hash of its pieces' hashes: pieces hash in parallel, and progress is reported between them.
constexpr uint64_t kCheckStep = 16ull << 20;
// A piece not yet in the page cache is read with pread in steps of this size, each hashed while it is still in the
// CPU's cache (a multiple of 32: StreamingHash's block).
constexpr uint64_t kReadStep = 1ull << 20;

// Reads [offset, offset + len) of `fd` in kReadStep steps into `buffer`, and hashes it as PackCache::hash(...,
// seed) would. False when the file cannot be read there (the caller then hashes through the mapping).
bool read_and_hash(int fd, uint64_t offset, uint64_t len, uint64_t seed, std::vector<uint8_t> *buffer, uint64_t *out) {
    StreamingHash h(seed);
    buffer->resize(kReadStep);
    for (uint64_t done = 0;;) {  // every step but the last is kReadStep, so only the last leaves a tail
        const uint64_t want = std::min(kReadStep, len - done);
        for (uint64_t got = 0; got < want;) {
            const ssize_t n = pread(fd, buffer->data() + got, want - got, static_cast<off_t>(offset + done + got));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            got += static_cast<uint64_t>(n);
        }
        done += want;
        const uint64_t whole = want / 32 * 32;
        h.blocks(buffer->data(), whole);
        if (done == len) {
            *out = h.finish(buffer->data() + whole, want - whole);
            return true;
        }
    }
}

// Whether a piece of the mapping is in the page cache, judged by kResidencySamples pages spread over it (asking
// for each of a 16 MiB piece's 4,096 pages cost a tenth of a warm check). A piece judged wrongly is still hashed
// right, only through the slower path.
constexpr int kResidencySamples = 8;
bool looks_resident(const mem::MappedFile &mapping, uint64_t offset, uint64_t len) {
    for (int k = 0; k < kResidencySamples; ++k)
        if (!mapping.resident(offset + len * static_cast<uint64_t>(2 * k + 1) / (2 * kResidencySamples), 1)) return false;
    return true;
}

}  // namespace

// The hash of each buffer (data[i], bytes[i]) as the table stores it, computed on up to `threads` threads (the
// calling one included, which alone reports progress: bytes hashed, bytes in all). False when progress cancelled.
// With `mapping` (the buffers lie in it; `path` is the file it maps), a piece that looks resident (looks_resident:
// sampled pages in the page cache) is mapped in one call and hashed in place; any other is read from `path` with
// pread and hashed as it arrives, then mapped. On a cold cache that is what makes the check cost one streaming read of the file: faulting a mapping in,
// even with MADV_WILLNEED ahead, read this disk at half the rate (bench/results/load.md, run 3).
static bool hash_buffers(const std::vector<const uint8_t *> &data, const std::vector<uint64_t> &bytes, int threads,
                         const PackCache::Progress &progress, const mem::MappedFile *mapping, const char *path,
                         std::vector<uint64_t> *out) {
    struct Piece {
        size_t buffer;
        uint64_t at, len;
    };
    std::vector<Piece> pieces;
    std::vector<size_t> first(data.size() + 1, 0);
    uint64_t total = 0;
    for (size_t b = 0; b < data.size(); ++b) {
        first[b] = pieces.size();
        for (uint64_t at = 0; at < bytes[b]; at += kCheckStep) pieces.push_back({b, at, std::min(kCheckStep, bytes[b] - at)});
        total += bytes[b];
    }
    first[data.size()] = pieces.size();
    std::vector<uint64_t> piece_hash(pieces.size());
    // Before the first pieces are hashed, those that far ahead are asked for too.
    constexpr size_t kReadAhead = 4;
    if (mapping)
        for (size_t i = 0; i < std::min(kReadAhead, pieces.size()); ++i)
            mapping->will_need(static_cast<uint64_t>(data[pieces[i].buffer] + pieces[i].at - mapping->data()), pieces[i].len);
    // Without a file to read (or one that will not open), every piece goes through the mapping. The threads read
    // the pieces in file order, so the file is marked sequential (POSIX_FADV_SEQUENTIAL doubles its readahead).
    const int fd = mapping && path ? ::open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    std::atomic<size_t> next{0};
    std::atomic<uint64_t> done{0};
    std::atomic<bool> cancelled{false};
    auto work = [&](bool report) {
        std::vector<uint8_t> buffer;
        for (;;) {
            if (cancelled.load(std::memory_order_relaxed)) return;
            const size_t i = next.fetch_add(1, std::memory_order_relaxed);
            if (i >= pieces.size()) return;
            const Piece &p = pieces[i];
            const uint64_t seed = i - first[p.buffer];
            if (!mapping) {
                piece_hash[i] = PackCache::hash(data[p.buffer] + p.at, p.len, seed);
            } else {
                const uint64_t offset = static_cast<uint64_t>(data[p.buffer] + p.at - mapping->data());
                if (fd >= 0 && !looks_resident(*mapping, offset, p.len) &&
                    read_and_hash(fd, offset, p.len, seed, &buffer, &piece_hash[i])) {
                    (void)mapping->populate(offset, p.len);  // in the page cache now: this only maps the pages
                } else {
                    // Reads kReadAhead pieces ahead start now (on a cold page cache the disk then works while this
                    // piece is hashed), then this piece's pages are mapped in one call.
                    if (i + kReadAhead < pieces.size()) {
                        const Piece &q = pieces[i + kReadAhead];
                        mapping->will_need(static_cast<uint64_t>(data[q.buffer] + q.at - mapping->data()), q.len);
                    }
                    (void)mapping->populate(offset, p.len);
                    piece_hash[i] = PackCache::hash(data[p.buffer] + p.at, p.len, seed);
                }
            }
            const uint64_t d = done.fetch_add(p.len, std::memory_order_relaxed) + p.len;
            if (report && progress && !progress(d, total)) cancelled.store(true, std::memory_order_relaxed);
        }
    };
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads && static_cast<size_t>(t) < pieces.size(); ++t) {
        try {
            helpers.emplace_back(work, false);
        } catch (...) {  // no thread to be had: fewer helpers, same result
            break;
        }
    }
    work(true);
    for (std::thread &h : helpers) h.join();
    if (fd >= 0) ::close(fd);
    if (cancelled.load()) return false;
    out->resize(data.size());
    for (size_t b = 0; b < data.size(); ++b)
        (*out)[b] = PackCache::hash(reinterpret_cast<const uint8_t *>(piece_hash.data() + first[b]),
                                    (first[b + 1] - first[b]) * sizeof(uint64_t), bytes[b]);
    return true;
}

namespace {

// Threads that hash a cache: the machine's, up to 8 (hashing runs at memory bandwidth well before that).
int hash_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return static_cast<int>(std::clamp(n, 1u, 8u));
}

}  // namespace

uint64_t PackCache::hash(const uint8_t *data, uint64_t bytes, uint64_t seed) {
    StreamingHash h(seed);
    const uint64_t whole = bytes / 32 * 32;
    h.blocks(data, whole);
    return h.finish(data + whole, bytes - whole);
}

std::string default_pack_cache_path(const std::string &model_path) { return model_path + ".ktpack"; }

Status PackCache::open(const std::string &cache_path, const std::string &source_path, const gguf::File &source,
                       const PackCacheBuild &build, const Progress &progress, std::shared_ptr<PackCache> *out) {
    std::shared_ptr<PackCache> c(new PackCache());
    c->path_ = cache_path;
    c->build_ = build;
    c->source_data_offset_ = source.data_offset();
    struct stat st;
    if (stat(source_path.c_str(), &st) != 0) {
        // Without the source's identity no cache can be trusted or written.
        c->refusal_ = format("cannot stat the model file %s: %s", source_path.c_str(), std::strerror(errno));
        c->state_ = State::kDone;
        *out = std::move(c);
        return Status::ok();
    }
    c->source_size_ = static_cast<uint64_t>(st.st_size);
    c->source_mtime_ns_ = static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
    c->source_header_hash_ = hash(source.bytes().data(), std::min<uint64_t>(source.data_offset(), source.file_size()));
    Status sampled = sample_source(source_path, source.data_offset(), c->source_size_, &c->source_sample_hash_);
    if (!sampled.is_ok()) {
        c->refusal_ = sampled.message();
        c->state_ = State::kDone;
        *out = std::move(c);
        return Status::ok();
    }
    const Status checked = c->check(source, progress);
    if (checked.code() == KT_STATUS_CANCELLED) return checked;
    if (checked.is_ok()) {
        c->state_ = State::kReading;
        for (const Entry &e : c->entries_) c->covered_.insert(e.name);
    } else {
        c->refusal_ = checked.message();
        c->state_ = State::kWriting;
        c->mapping_.reset();
        c->entries_.clear();
    }
    *out = std::move(c);
    return Status::ok();
}

Status PackCache::check(const gguf::File &source, const Progress &progress) {
    struct stat st;
    if (stat(path_.c_str(), &st) != 0) return Status::error(KT_STATUS_NOT_FOUND, "no cache file yet");
    found_ = true;
    KT_RETURN_IF(static_cast<uint64_t>(st.st_size) < kHeaderBytes, KT_STATUS_INVALID_FILE,
                 "%llu bytes, shorter than its header (truncated)", static_cast<unsigned long long>(st.st_size));
    auto mapped = std::make_shared<mem::MappedFile>();
    KT_TRY(mem::MappedFile::open_shared(path_, mapped.get()));
    const uint8_t *f = mapped->data();
    const uint64_t size = mapped->size();
    KT_RETURN_IF(size < kHeaderBytes, KT_STATUS_INVALID_FILE, "shorter than its header (truncated)");

    // The header: format first (what follows is only meaningful in this format), then its own hash, then each field.
    KT_RETURN_IF(std::memcmp(f + kHdrMagic, kMagic, sizeof kMagic) != 0, KT_STATUS_INVALID_FILE,
                 "not a kt pack cache (bad magic)");
    KT_RETURN_IF(get_u32(f + kHdrFormat) != kFormatVersion, KT_STATUS_INVALID_FILE,
                 "cache format version %u, this kt reads %u", get_u32(f + kHdrFormat), kFormatVersion);
    KT_RETURN_IF(get_u32(f + kHdrHeaderBytes) != kHeaderBytes, KT_STATUS_INVALID_FILE, "header size %u, expected %llu",
                 get_u32(f + kHdrHeaderBytes), static_cast<unsigned long long>(kHeaderBytes));
    KT_RETURN_IF(get_u64(f + kHdrHash) != hash(f, kHdrHashed), KT_STATUS_INVALID_FILE, "header checksum mismatch");
    for (uint64_t i = kHdrHash + 8; i < kHeaderBytes; ++i)
        KT_RETURN_IF(f[i] != 0, KT_STATUS_INVALID_FILE, "nonzero byte in the header's padding at %llu",
                     static_cast<unsigned long long>(i));
    KT_RETURN_IF(get_u32(f + kHdrKtVersion) != build_.kt_version, KT_STATUS_INVALID_FILE,
                 "written by kt version %u, this is %u", get_u32(f + kHdrKtVersion), build_.kt_version);
    std::string git, kernel_set;
    KT_RETURN_IF(!get_str(f + kHdrGit, kGitBytes, &git), KT_STATUS_INVALID_FILE, "malformed git revision field");
    KT_RETURN_IF(git != build_.git_revision, KT_STATUS_INVALID_FILE, "written by kt at git %s, this is %s", git.c_str(),
                 build_.git_revision.c_str());
    KT_RETURN_IF(get_u32(f + kHdrLayoutVersion) != cpu::kPackedLayoutVersion, KT_STATUS_INVALID_FILE,
                 "packed-layout version %u, this kt packs version %u", get_u32(f + kHdrLayoutVersion),
                 cpu::kPackedLayoutVersion);
    KT_RETURN_IF(!get_str(f + kHdrKernelSet, kKernelSetBytes, &kernel_set), KT_STATUS_INVALID_FILE,
                 "malformed kernel set field");
    KT_RETURN_IF(kernel_set != build_.kernel_set || static_cast<int32_t>(get_u32(f + kHdrIsa)) != build_.isa_level,
                 KT_STATUS_INVALID_FILE, "packed for kernel set %s (ISA level %d), this host's engine uses %s (%d)",
                 kernel_set.c_str(), static_cast<int32_t>(get_u32(f + kHdrIsa)), build_.kernel_set.c_str(),
                 build_.isa_level);
    KT_RETURN_IF(static_cast<int32_t>(get_u32(f + kHdrTargetFormat)) != build_.target_format ||
                     static_cast<int32_t>(get_u32(f + kHdrInt4Group)) != build_.int4_group ||
                     get_u32(f + kHdrReserved) != 0,
                 KT_STATUS_INVALID_FILE, "packing options (format %d, int4 group %d) differ from this load's (%d, %d)",
                 static_cast<int32_t>(get_u32(f + kHdrTargetFormat)), static_cast<int32_t>(get_u32(f + kHdrInt4Group)),
                 build_.target_format, build_.int4_group);
    KT_RETURN_IF(get_u64(f + kHdrSourceSize) != source_size_, KT_STATUS_INVALID_FILE,
                 "made from a model file of %llu bytes, this one has %llu",
                 static_cast<unsigned long long>(get_u64(f + kHdrSourceSize)), static_cast<unsigned long long>(source_size_));
    KT_RETURN_IF(get_u64(f + kHdrSourceMtime) != source_mtime_ns_, KT_STATUS_INVALID_FILE,
                 "the model file was modified after the cache was written (mtime differs)");
    KT_RETURN_IF(get_u64(f + kHdrSourceDataOffset) != source_data_offset_ ||
                     get_u64(f + kHdrSourceHeaderHash) != source_header_hash_,
                 KT_STATUS_INVALID_FILE, "the model file's header, metadata or tensor infos differ");
    KT_RETURN_IF(get_u64(f + kHdrSourceSampleHash) != source_sample_hash_, KT_STATUS_INVALID_FILE,
                 "the model file's tensor bytes differ (sampled)");
    KT_RETURN_IF(get_u64(f + kHdrFileBytes) != size, KT_STATUS_INVALID_FILE,
                 "%llu bytes, its header says %llu (truncated or extended)", static_cast<unsigned long long>(size),
                 static_cast<unsigned long long>(get_u64(f + kHdrFileBytes)));

    // The table.
    const uint64_t n = get_u64(f + kHdrEntries), table_offset = get_u64(f + kHdrTableOffset),
                   table_bytes = get_u64(f + kHdrTableBytes);
    KT_RETURN_IF(table_offset != kHeaderBytes || n == 0 || n > (1u << 24) || table_bytes != n * kEntryBytes ||
                     table_bytes > size - table_offset,
                 KT_STATUS_INVALID_FILE, "bad table: %llu entries, %llu bytes at %llu", static_cast<unsigned long long>(n),
                 static_cast<unsigned long long>(table_bytes), static_cast<unsigned long long>(table_offset));
    KT_RETURN_IF(get_u64(f + kHdrTableHash) != hash(f + table_offset, table_bytes), KT_STATUS_INVALID_FILE,
                 "table checksum mismatch");
    std::vector<Entry> entries(static_cast<size_t>(n));
    uint64_t end = round_up(table_offset + table_bytes, kBufferAlignment);
    for (uint64_t i = 0; i < n; ++i) {
        const uint8_t *e = f + table_offset + i * kEntryBytes;
        Entry &en = entries[static_cast<size_t>(i)];
        moe::PackedBufferDesc &d = en.desc;
        KT_RETURN_IF(!get_str(e + kEntName, kNameBytes, &en.name) || en.name.empty(), KT_STATUS_INVALID_FILE,
                     "entry %llu: malformed tensor name", static_cast<unsigned long long>(i));
        KT_RETURN_IF(!source.find_tensor(en.name), KT_STATUS_INVALID_FILE, "entry %llu: tensor %s is not in the model",
                     static_cast<unsigned long long>(i), en.name.c_str());
        d.part = static_cast<int32_t>(get_u32(e + kEntPart));
        d.shard = static_cast<int32_t>(get_u32(e + kEntShard));
        d.shard_begin = static_cast<int64_t>(get_u64(e + kEntShardBegin));
        const int32_t type = static_cast<int32_t>(get_u32(e + kEntType));
        d.layout.group = static_cast<int32_t>(get_u32(e + kEntGroup));
        d.layout.superblock_k_offset = static_cast<int32_t>(get_u32(e + kEntSbOffset));
        d.layout.n = static_cast<int64_t>(get_u64(e + kEntN));
        d.layout.k = static_cast<int64_t>(get_u64(e + kEntK));
        d.layout.bytes = static_cast<size_t>(get_u64(e + kEntLayoutBytes));
        d.stride = get_u64(e + kEntStride);
        d.count = static_cast<int64_t>(get_u64(e + kEntCount));
        en.offset = get_u64(e + kEntOffset);
        en.hash = get_u64(e + kEntHash);
        KT_RETURN_IF(d.part < moe::PackedBufferDesc::kLinear || d.part > moe::PackedBufferDesc::kDown || d.shard < 0 ||
                         d.shard_begin < 0 || type < 0 || type >= cpu::kPackedTypeCount || get_u32(e + kEntReserved) != 0 ||
                         get_u64(e + kEntReserved2) != 0,
                     KT_STATUS_INVALID_FILE, "entry %llu (%s): bad part, shard or type", static_cast<unsigned long long>(i),
                     en.name.c_str());
        d.layout.type = static_cast<cpu::PackedType>(type);
        KT_RETURN_IF(d.layout.bytes == 0 || d.stride < d.layout.bytes || d.count < 1 || d.count > (1 << 20) ||
                         d.stride > size || d.bytes() > size,
                     KT_STATUS_INVALID_FILE, "entry %llu (%s): bad sizes", static_cast<unsigned long long>(i), en.name.c_str());
        // Buffers lie in table order, each at the first aligned offset after the previous one: no gaps to hide
        // bytes in, no overlaps, nothing past the end.
        KT_RETURN_IF(en.offset != end || en.offset > size || d.bytes() > size - en.offset, KT_STATUS_INVALID_FILE,
                     "entry %llu (%s): buffer at %llu, expected at %llu (%llu bytes; the file has %llu)",
                     static_cast<unsigned long long>(i), en.name.c_str(), static_cast<unsigned long long>(en.offset),
                     static_cast<unsigned long long>(end), static_cast<unsigned long long>(d.bytes()),
                     static_cast<unsigned long long>(size));
        end = en.offset + d.bytes();
        if (i + 1 < n) end = round_up(end, kBufferAlignment);
    }
    KT_RETURN_IF(end != size, KT_STATUS_INVALID_FILE, "the buffers end at %llu, the file at %llu",
                 static_cast<unsigned long long>(end), static_cast<unsigned long long>(size));

    // Every buffer's bytes: reading them all is the prefetch, so the check costs about one pass over the file.
    std::vector<const uint8_t *> data;
    std::vector<uint64_t> bytes, hashes;
    for (const Entry &en : entries) {
        data.push_back(f + en.offset);
        bytes.push_back(en.desc.bytes());
    }
    KT_RETURN_IF(!hash_buffers(data, bytes, hash_threads(), progress, mapped.get(), path_.c_str(), &hashes), KT_STATUS_CANCELLED,
                 "loading cancelled");
    for (size_t i = 0; i < entries.size(); ++i)
        KT_RETURN_IF(hashes[i] != entries[i].hash, KT_STATUS_INVALID_FILE,
                     "the bytes of %s (%s, shard %d) do not match their checksum", entries[i].name.c_str(),
                     part_name(entries[i].desc.part), entries[i].desc.shard);
    // The alignment gaps (before the first buffer and between buffers) are zero: no byte of the file goes unchecked.
    uint64_t gap = table_offset + table_bytes;
    for (const Entry &en : entries) {
        for (uint64_t i = gap; i < en.offset; ++i)
            KT_RETURN_IF(f[i] != 0, KT_STATUS_INVALID_FILE, "nonzero byte at %llu between buffers",
                         static_cast<unsigned long long>(i));
        gap = en.offset + en.desc.bytes();
    }
    mapping_ = std::move(mapped);
    entries_ = std::move(entries);
    return Status::ok();
}

bool PackCache::take(const moe::PackedRequest *requests, size_t n) {
    if (state_ != State::kReading) return false;
    auto stale = [&](const std::string &why) {
        KT_LOG_WARN_MSG("pack cache %s: %s; this and the remaining tensors are packed from the model, and the cache "
                        "is rewritten", path_.c_str(), why.c_str());
        state_ = State::kStale;
        return false;
    };
    // All or nothing: every request checked against the table before any view is made.
    for (size_t i = 0; i < n; ++i) {
        const moe::PackedRequest &r = requests[i];
        if (next_ + i >= entries_.size())
            return stale(format("has %zu buffers, the model needs more (%s)", entries_.size(), r.name));
        const Entry &e = entries_[next_ + i];
        if (e.name != r.name || !same_desc(e.desc, r.desc))
            return stale(format("buffer %zu is %s (%s, shard %d, %llu bytes), the model asks for %s (%s, shard %d, %llu bytes)",
                                next_ + i, e.name.c_str(), part_name(e.desc.part), e.desc.shard,
                                static_cast<unsigned long long>(e.desc.bytes()), r.name, part_name(r.desc.part),
                                r.desc.shard, static_cast<unsigned long long>(r.desc.bytes())));
    }
    std::vector<mem::WeightStorage> views(n);
    for (size_t i = 0; i < n; ++i) {
        const Status s = mem::WeightStorage::view(mapping_, mapping_->data() + entries_[next_ + i].offset,
                                                  requests[i].desc.bytes(), &views[i]);
        if (!s.is_ok()) return stale(s.message());
    }
    for (size_t i = 0; i < n; ++i) {
        *requests[i].out = std::move(views[i]);
        kept_.push_back({entries_[next_ + i].name, requests[i].desc, requests[i].out->data()});
    }
    next_ += n;
    return true;
}

void PackCache::keep(const char *name, const moe::PackedBufferDesc &desc, const mem::WeightStorage &buffer) {
    if (state_ != State::kWriting && state_ != State::kStale) return;
    kept_.push_back({name, desc, buffer.data()});
}

void PackCache::finish() {
    if (state_ == State::kReading && next_ != entries_.size()) {
        KT_LOG_WARN_MSG("pack cache %s: the model used %zu of its %zu buffers; rewriting it", path_.c_str(), next_,
                        entries_.size());
        state_ = State::kStale;
    }
    if (state_ == State::kReading) {
        KT_LOG_INFO_MSG("pack cache %s: used (%zu buffers, %.2f GB mapped shared, nothing repacked)", path_.c_str(),
                        entries_.size(), static_cast<double>(mapping_->size()) * 1e-9);
        write_outcome_ = "used";
    } else if (state_ == State::kWriting || state_ == State::kStale) {
        std::string written;
        const Status s = write_file(&written);
        if (s.is_ok()) {
            write_outcome_ = "written";
            KT_LOG_INFO_MSG("pack cache %s: %s", path_.c_str(), written.c_str());
        } else {
            write_outcome_ = "not written: " + s.message();
            KT_LOG_WARN_MSG("pack cache %s: not written (the load goes on without it): %s", path_.c_str(),
                            s.message().c_str());
        }
    }
    state_ = State::kDone;
    kept_.clear();
    kept_.shrink_to_fit();
}

Status PackCache::write_file(std::string *written) {
    KT_RETURN_IF(kept_.empty(), KT_STATUS_INVALID_ARGUMENT, "the model has no packed weights");
    const uint64_t n = kept_.size();
    std::vector<uint8_t> head(static_cast<size_t>(kHeaderBytes + n * kEntryBytes), 0);
    uint8_t *f = head.data();
    uint64_t end = round_up(kHeaderBytes + n * kEntryBytes, kBufferAlignment);
    std::vector<uint64_t> offsets(static_cast<size_t>(n));
    uint64_t payload = 0;
    std::vector<const uint8_t *> data;
    std::vector<uint64_t> sizes, hashes;
    for (const Kept &k : kept_) {
        data.push_back(k.data);
        sizes.push_back(k.desc.bytes());
    }
    hash_buffers(data, sizes, hash_threads(), nullptr, nullptr, nullptr, &hashes);
    for (uint64_t i = 0; i < n; ++i) {
        const Kept &k = kept_[static_cast<size_t>(i)];
        const moe::PackedBufferDesc &d = k.desc;
        uint8_t *e = f + kHeaderBytes + i * kEntryBytes;
        KT_RETURN_IF(!put_str(e + kEntName, kNameBytes, k.name), KT_STATUS_INVALID_ARGUMENT,
                     "tensor name %s is too long for the cache", k.name.c_str());
        put_u32(e + kEntPart, static_cast<uint32_t>(d.part));
        put_u32(e + kEntShard, static_cast<uint32_t>(d.shard));
        put_u64(e + kEntShardBegin, static_cast<uint64_t>(d.shard_begin));
        put_u32(e + kEntType, static_cast<uint32_t>(d.layout.type));
        put_u32(e + kEntGroup, static_cast<uint32_t>(d.layout.group));
        put_u32(e + kEntSbOffset, static_cast<uint32_t>(d.layout.superblock_k_offset));
        put_u64(e + kEntN, static_cast<uint64_t>(d.layout.n));
        put_u64(e + kEntK, static_cast<uint64_t>(d.layout.k));
        put_u64(e + kEntLayoutBytes, d.layout.bytes);
        put_u64(e + kEntStride, d.stride);
        put_u64(e + kEntCount, static_cast<uint64_t>(d.count));
        put_u64(e + kEntOffset, end);
        put_u64(e + kEntHash, hashes[static_cast<size_t>(i)]);
        offsets[static_cast<size_t>(i)] = end;
        end += d.bytes();
        payload += d.bytes();
        if (i + 1 < n) end = round_up(end, kBufferAlignment);
    }
    std::memcpy(f + kHdrMagic, kMagic, sizeof kMagic);
    put_u32(f + kHdrFormat, kFormatVersion);
    put_u32(f + kHdrHeaderBytes, static_cast<uint32_t>(kHeaderBytes));
    put_u32(f + kHdrKtVersion, build_.kt_version);
    put_u32(f + kHdrLayoutVersion, cpu::kPackedLayoutVersion);
    KT_RETURN_IF(!put_str(f + kHdrGit, kGitBytes, build_.git_revision) ||
                     !put_str(f + kHdrKernelSet, kKernelSetBytes, build_.kernel_set),
                 KT_STATUS_INTERNAL, "git revision or kernel set name too long");
    put_u32(f + kHdrIsa, static_cast<uint32_t>(build_.isa_level));
    put_u32(f + kHdrTargetFormat, static_cast<uint32_t>(build_.target_format));
    put_u32(f + kHdrInt4Group, static_cast<uint32_t>(build_.int4_group));
    put_u64(f + kHdrSourceSize, source_size_);
    put_u64(f + kHdrSourceMtime, source_mtime_ns_);
    put_u64(f + kHdrSourceDataOffset, source_data_offset_);
    put_u64(f + kHdrSourceHeaderHash, source_header_hash_);
    put_u64(f + kHdrSourceSampleHash, source_sample_hash_);
    put_u64(f + kHdrEntries, n);
    put_u64(f + kHdrTableOffset, kHeaderBytes);
    put_u64(f + kHdrTableBytes, n * kEntryBytes);
    put_u64(f + kHdrFileBytes, end);
    put_u64(f + kHdrTableHash, hash(f + kHeaderBytes, n * kEntryBytes));
    put_u64(f + kHdrHash, hash(f, kHdrHashed));

    // A file of this process's own, complete and on disk before it takes the cache's name.
    const std::string tmp = path_ + ".tmp-" + std::to_string(static_cast<long long>(getpid()));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    KT_RETURN_IF(fd < 0, KT_STATUS_IO_ERROR, "cannot create %s: %s", tmp.c_str(), std::strerror(errno));
    auto write_all = [&](const uint8_t *p, uint64_t bytes, uint64_t at) -> Status {
        while (bytes > 0) {
            const ssize_t w = pwrite(fd, p, std::min<uint64_t>(bytes, 1ull << 30), static_cast<off_t>(at));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return Status::error(KT_STATUS_IO_ERROR, "cannot write %s: %s", tmp.c_str(), std::strerror(errno));
            p += w;
            at += static_cast<uint64_t>(w);
            bytes -= static_cast<uint64_t>(w);
        }
        return Status::ok();
    };
    Status s = write_all(head.data(), head.size(), 0);
    for (uint64_t i = 0; i < n && s.is_ok(); ++i)
        s = write_all(kept_[static_cast<size_t>(i)].data, kept_[static_cast<size_t>(i)].desc.bytes(), offsets[static_cast<size_t>(i)]);
    // The gaps between buffers are holes; the length is set explicitly for a last buffer that ends in one.
    if (s.is_ok() && ftruncate(fd, static_cast<off_t>(end)) != 0)
        s = Status::error(KT_STATUS_IO_ERROR, "cannot size %s: %s", tmp.c_str(), std::strerror(errno));
    if (s.is_ok() && fsync(fd) != 0)
        s = Status::error(KT_STATUS_IO_ERROR, "cannot fsync %s: %s", tmp.c_str(), std::strerror(errno));
    if (::close(fd) != 0 && s.is_ok())
        s = Status::error(KT_STATUS_IO_ERROR, "cannot close %s: %s", tmp.c_str(), std::strerror(errno));
    if (s.is_ok() && rename(tmp.c_str(), path_.c_str()) != 0)
        s = Status::error(KT_STATUS_IO_ERROR, "cannot rename %s to %s: %s", tmp.c_str(), path_.c_str(), std::strerror(errno));
    if (!s.is_ok()) {
        unlink(tmp.c_str());
        return s;
    }
    // The rename itself is durable once the directory is synced (best effort: a failure here loses only the cache).
    const size_t slash = path_.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        ::close(dfd);
    }
    *written = format("written (%llu buffers, %.2f GB packed, %.2f GB file)", static_cast<unsigned long long>(n),
                      static_cast<double>(payload) * 1e-9, static_cast<double>(end) * 1e-9);
    return Status::ok();
}

}  // namespace kt::runtime
