// The packed cache file (kt_model_params.pack_cache): written by the first prepared load, mapped by later ones
// (in this process and in others at once), and refused, with the model repacked from its file, whenever it is
// missing, stale, foreign or damaged in any byte. Every comparison of logits is between two independent kt paths:
// weights mapped from the cache against the same weights packed from the model file by a load without a cache.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "kt.h"
#include "mem/mapped_file.h"
#include "runtime/pack_cache.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace {

using kt::runtime::PackCache;
using kt::test::TempDir;

// kt's log while a test runs, for what the cache did.
struct LogCapture {
    std::mutex mutex;
    std::vector<std::string> lines;
};
LogCapture g_log;

void capture(int32_t, const char *message, void *) {
    std::lock_guard<std::mutex> lock(g_log.mutex);
    g_log.lines.emplace_back(message);
}

// The pack-cache lines logged since the last call.
std::string take_cache_log() {
    std::lock_guard<std::mutex> lock(g_log.mutex);
    std::string s;
    for (const std::string &l : g_log.lines)
        if (l.find("pack cache") != std::string::npos) s += l + "\n";
    g_log.lines.clear();
    return s;
}

bool contains(const std::string &s, const char *what) { return s.find(what) != std::string::npos; }

// Q8_0 experts and projections (kept as Q8_0) with a Q4_K / Q6_K pair (kept as stored, super-block layouts):
// several packed formats in one small file.
kt::test::TinyModel cache_model() {
    kt::test::TinyModel m;
    m.n_embd = 256;
    m.n_ff = 256;
    m.n_expert = 8;
    m.n_vocab = 512;
    m.types = {{"ffn_gate_exps", KT_TYPE_Q4_K}, {"ffn_up_exps", KT_TYPE_Q8_0}, {"ffn_down_exps", KT_TYPE_Q6_K}, {"attn_q.weight", KT_TYPE_Q8_0}};
    return m;
}

struct Loaded {
    kt_status status = KT_STATUS_OK;
    std::vector<float> logits;
    std::string log;  // the pack-cache lines of this load
};

// Loads with prepare = 1 (pack_cache as given), runs a short prompt on the engine and returns the last logits.
Loaded load_and_run(const std::string &model_path, bool pack_cache, const char *cache_path = nullptr) {
    take_cache_log();
    kt_model_params mp;
    kt_model_params_init(&mp);
    mp.prepare = 1;
    mp.n_threads = 2;
    mp.pack_cache = pack_cache ? 1 : 0;
    mp.pack_cache_path = cache_path;
    Loaded r;
    kt_model *model = nullptr;
    kt_error err = {sizeof err, 0, {0}};
    r.status = kt_model_load(model_path.c_str(), &mp, &model, &err);
    if (r.status != KT_STATUS_OK) {
        r.log = take_cache_log() + err.message;
        return r;
    }
    kt_context_params cp;
    kt_context_params_init(&cp);
    cp.n_ctx = 16;
    cp.n_threads = 2;
    kt_context *ctx = nullptr;
    REQUIRE(kt_context_create(model, &cp, &ctx, nullptr) == KT_STATUS_OK);
    const int32_t prompt[] = {5, 3, 250, 9};
    REQUIRE(kt_context_decode(ctx, prompt, 4, KT_LOGITS_LAST) == KT_STATUS_OK);
    const float *l = nullptr;
    REQUIRE(kt_context_logits(ctx, -1, &l, nullptr) == KT_STATUS_OK);
    r.logits.assign(l, l + kt_context_n_vocab(ctx));
    kt_context_free(ctx);
    kt_model_free(model);
    r.log = take_cache_log();
    return r;
}

bool exists(const std::string &path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// Sets a file's mtime (to restore it after changing bytes, so that only the content check can notice).
void set_mtime(const std::string &path, const struct timespec &t) {
    struct timespec times[2] = {t, t};
    REQUIRE(utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}
struct timespec mtime_of(const std::string &path) {
    struct stat st;
    REQUIRE(stat(path.c_str(), &st) == 0);
    return st.st_mtim;
}

uint64_t get_u64(const std::vector<uint8_t> &b, uint64_t at) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + static_cast<uint64_t>(i)];
    return v;
}
uint32_t get_u32(const std::vector<uint8_t> &b, uint64_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | b[at + static_cast<uint64_t>(i)];
    return v;
}
void put_u32(std::vector<uint8_t> *b, uint64_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) (*b)[at + static_cast<uint64_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(std::vector<uint8_t> *b, uint64_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i) (*b)[at + static_cast<uint64_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}
// Re-seals a header whose fields a test changed, so that the field's own check is what refuses it.
void reseal_header(std::vector<uint8_t> *b) { put_u64(b, PackCache::kHdrHash, PackCache::hash(b->data(), PackCache::kHdrHashed)); }
void reseal_table(std::vector<uint8_t> *b) {
    const uint64_t bytes = get_u64(*b, PackCache::kHdrTableBytes);
    put_u64(b, PackCache::kHdrTableHash, PackCache::hash(b->data() + PackCache::kHeaderBytes, bytes));
    reseal_header(b);
}

struct Fixture {
    TempDir dir;
    std::string model = dir.file("m.gguf");
    std::string cache = model + ".ktpack";
    std::vector<float> reference;  // logits of a load without the cache
    Fixture() {
        kt_log_set(capture, nullptr, KT_LOG_INFO);
        // Made once per process (quantizing to K-quants is the slow part), written afresh for each test.
        static const std::vector<uint8_t> bytes = kt::test::write_tiny_model(cache_model());
        kt::test::write_file(model, bytes);
        const Loaded plain = load_and_run(model, false);
        INFO(plain.log);
        REQUIRE(plain.status == KT_STATUS_OK);
        CHECK(plain.log.empty());  // no cache asked for: none mentioned, none written
        CHECK_FALSE(exists(cache));
        reference = plain.logits;
    }
    ~Fixture() { kt_log_set(nullptr, nullptr, KT_LOG_INFO); }
};

}  // namespace

TEST_CASE("pack cache: the first load writes it, the next maps it, with the logits of a load without it") {
    Fixture fx;
    const Loaded first = load_and_run(fx.model, true);
    REQUIRE(first.status == KT_STATUS_OK);
    INFO(first.log);
    CHECK(contains(first.log, "no cache file yet"));
    CHECK(contains(first.log, "written"));
    CHECK(first.logits == fx.reference);
    REQUIRE(exists(fx.cache));
    CHECK_FALSE(exists(fx.cache + ".tmp-" + std::to_string(getpid())));

    const Loaded second = load_and_run(fx.model, true);
    REQUIRE(second.status == KT_STATUS_OK);
    INFO(second.log);
    CHECK(contains(second.log, "valid"));
    CHECK(contains(second.log, ": used"));
    CHECK_FALSE(contains(second.log, "written"));
    CHECK(second.logits == fx.reference);  // bit for bit: the same packed bytes, mapped instead of packed

    SECTION("evicted from the page cache: its pieces are read with pread, hashed as they arrive, and it is used") {
        // The check reads cold pieces with pread and warm ones through the mapping (runtime/pack_cache.cpp,
        // hash_buffers); both must give the hashes the writer computed from the packed buffers in memory.
        const int fd = open(fx.cache.c_str(), O_RDONLY);
        REQUIRE(fd >= 0);
        REQUIRE(fdatasync(fd) == 0);
        REQUIRE(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
        close(fd);
        kt::mem::MappedFile probe;
        REQUIRE(kt::mem::MappedFile::open_shared(fx.cache, &probe).is_ok());
        const bool evicted = !probe.resident(0, probe.size());
        probe = kt::mem::MappedFile();
        if (!evicted) {
            WARN("the file system kept the cache's pages resident (tmpfs?): the cold path was not exercised");
        } else {
            const Loaded cold = load_and_run(fx.model, true);
            INFO(cold.log);
            CHECK(contains(cold.log, ": used"));
            CHECK(cold.logits == fx.reference);
        }
    }

    SECTION("a path of the caller's choice") {
        const std::string other = fx.dir.file("elsewhere.ktpack");
        CHECK(load_and_run(fx.model, true, other.c_str()).logits == fx.reference);
        REQUIRE(exists(other));
        const Loaded again = load_and_run(fx.model, true, other.c_str());
        CHECK(contains(again.log, ": used"));
        CHECK(again.logits == fx.reference);
    }
}

TEST_CASE("pack cache: a changed model file is caught, and the model repacked from it") {
    Fixture fx;
    REQUIRE(load_and_run(fx.model, true).status == KT_STATUS_OK);
    REQUIRE(exists(fx.cache));

    SECTION("touched (mtime)") {
        struct timespec t = mtime_of(fx.model);
        t.tv_sec += 10;
        set_mtime(fx.model, t);
        const Loaded r = load_and_run(fx.model, true);
        INFO(r.log);
        CHECK(contains(r.log, "refused"));
        CHECK(contains(r.log, "mtime"));
        CHECK(r.logits == fx.reference);
        CHECK(contains(load_and_run(fx.model, true).log, ": used"));  // the cache written for the touched file
    }
    SECTION("bytes of a tensor changed, mtime restored") {
        const struct timespec t = mtime_of(fx.model);
        std::vector<uint8_t> bytes = kt::test::read_file(fx.model);
        // The last sample ends at the file's end: the last tensor's bytes.
        bytes[bytes.size() - 100] ^= 0x5a;
        kt::test::write_file(fx.model, bytes);
        set_mtime(fx.model, t);
        const Loaded plain_changed = load_and_run(fx.model, false);
        const Loaded r = load_and_run(fx.model, true);
        INFO(r.log);
        CHECK(contains(r.log, "refused"));
        CHECK(contains(r.log, "sampled"));
        CHECK(r.logits == plain_changed.logits);
    }
}

TEST_CASE("pack cache: a foreign, stale or damaged cache is refused with its reason, never misread") {
    Fixture fx;
    REQUIRE(load_and_run(fx.model, true).status == KT_STATUS_OK);
    const std::vector<uint8_t> good = kt::test::read_file(fx.cache);
    REQUIRE(good.size() > PackCache::kHeaderBytes);
    const uint64_t entries = get_u64(good, PackCache::kHdrEntries);
    REQUIRE(entries > 10);
    const uint64_t first_buffer = get_u64(good, PackCache::kHeaderBytes + PackCache::kEntOffset);

    struct Case {
        const char *what;
        const char *reason;  // a word of the logged reason
        std::vector<uint8_t> bytes;
    };
    std::vector<Case> cases;
    auto add = [&](const char *what, const char *reason, auto &&edit) {
        std::vector<uint8_t> b = good;
        edit(&b);
        cases.push_back({what, reason, std::move(b)});
    };
    add("empty", "truncated", [](std::vector<uint8_t> *b) { b->clear(); });
    add("truncated in the header", "truncated", [](std::vector<uint8_t> *b) { b->resize(100); });
    add("truncated in the last buffer", "truncated", [](std::vector<uint8_t> *b) { b->resize(b->size() - 1); });
    add("extended", "extended", [](std::vector<uint8_t> *b) { b->push_back(0); });
    add("garbage", "magic", [](std::vector<uint8_t> *b) {
        std::mt19937 rng(7);
        for (uint8_t &x : *b) x = static_cast<uint8_t>(rng());
    });
    add("another format version", "format version", [](std::vector<uint8_t> *b) { put_u32(b, PackCache::kHdrFormat, 2); });
    add("header bit flip", "header checksum", [](std::vector<uint8_t> *b) { (*b)[PackCache::kHdrSourceSize] ^= 1; });
    add("another kt version", "kt version", [](std::vector<uint8_t> *b) {
        put_u32(b, PackCache::kHdrKtVersion, KT_VERSION_NUMBER + 1);
        reseal_header(b);
    });
    add("another git revision", "git", [](std::vector<uint8_t> *b) {
        (*b)[PackCache::kHdrGit] ^= 1;
        reseal_header(b);
    });
    add("another packed-layout version", "packed-layout", [](std::vector<uint8_t> *b) {
        put_u32(b, PackCache::kHdrLayoutVersion, 99);
        reseal_header(b);
    });
    // Another host's kernel set: an AMX host's cache on any other host, and an AVX-512 host's on an AMX host.
    const bool on_amx = std::memcmp(good.data() + PackCache::kHdrKernelSet, "amx", 4) == 0;
    add(on_amx ? "another kernel set (an AVX-512 host's)" : "another kernel set (an AMX host's)", "kernel set",
        [on_amx](std::vector<uint8_t> *b) {
            const char *other = on_amx ? "avx512" : "amx";
            std::memset(b->data() + PackCache::kHdrKernelSet, 0, PackCache::kKernelSetBytes);
            std::memcpy(b->data() + PackCache::kHdrKernelSet, other, std::strlen(other));
            put_u32(b, PackCache::kHdrIsa, on_amx ? 2 : 3);
            reseal_header(b);
        });
    add("another ISA level", "kernel set", [](std::vector<uint8_t> *b) {
        put_u32(b, PackCache::kHdrIsa, (get_u32(*b, PackCache::kHdrIsa) + 1) % 4);
        reseal_header(b);
    });
    add("other packing options", "packing options", [](std::vector<uint8_t> *b) {
        put_u32(b, PackCache::kHdrInt4Group, 32);
        reseal_header(b);
    });
    add("another source size", "model file of", [](std::vector<uint8_t> *b) {
        put_u64(b, PackCache::kHdrSourceSize, get_u64(*b, PackCache::kHdrSourceSize) + 1);
        reseal_header(b);
    });
    add("another source header", "metadata", [](std::vector<uint8_t> *b) {
        put_u64(b, PackCache::kHdrSourceHeaderHash, 1);
        reseal_header(b);
    });
    add("table bit flip", "table checksum", [&](std::vector<uint8_t> *b) { (*b)[PackCache::kHeaderBytes + 5] ^= 0x10; });
    add("an entry's size changed", "entry", [&](std::vector<uint8_t> *b) {
        const uint64_t at = PackCache::kHeaderBytes + 3 * PackCache::kEntryBytes + PackCache::kEntStride;
        put_u64(b, at, get_u64(*b, at) + 64);
        reseal_table(b);
    });
    add("an entry's offset moved", "expected at", [&](std::vector<uint8_t> *b) {
        const uint64_t at = PackCache::kHeaderBytes + 2 * PackCache::kEntryBytes + PackCache::kEntOffset;
        put_u64(b, at, get_u64(*b, at) + 4096);
        reseal_table(b);
    });
    add("an entry naming a tensor the model lacks", "not in the model", [&](std::vector<uint8_t> *b) {
        (*b)[PackCache::kHeaderBytes + PackCache::kEntName] = 'X';
        reseal_table(b);
    });
    add("a packed weight's byte flipped", "checksum", [&](std::vector<uint8_t> *b) { (*b)[first_buffer + 77] ^= 0x01; });
    add("the last byte flipped", "checksum", [](std::vector<uint8_t> *b) { b->back() ^= 0x80; });
    add("a byte between buffers set", "between buffers", [&](std::vector<uint8_t> *b) { (*b)[first_buffer - 1] = 1; });

    for (const Case &c : cases) {
        INFO(c.what);
        kt::test::write_file(fx.cache, c.bytes);
        const Loaded r = load_and_run(fx.model, true);
        INFO(r.log);
        REQUIRE(r.status == KT_STATUS_OK);
        CHECK(contains(r.log, "refused"));
        CHECK(contains(r.log, c.reason));
        CHECK(contains(r.log, "written"));  // replaced by a good one
        CHECK(r.logits == fx.reference);
        CHECK(kt::test::read_file(fx.cache) == good);  // what this kt writes for this file is deterministic
    }
}

TEST_CASE("pack cache: a corpus of random corruptions is always refused and never changes the weights") {
    Fixture fx;
    REQUIRE(load_and_run(fx.model, true).status == KT_STATUS_OK);
    const std::vector<uint8_t> good = kt::test::read_file(fx.cache);
    std::mt19937_64 rng(20261202);
    for (int i = 0; i < 24; ++i) {
        std::vector<uint8_t> b = good;
        const int kind = i % 3;
        if (kind == 0) {  // one byte anywhere, changed
            b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        } else if (kind == 1) {  // a run of bytes in the first pages (header, table, first buffers), changed
            const size_t at = rng() % std::min<size_t>(b.size(), 3 * 4096), n = 1 + rng() % 64;
            for (size_t j = at; j < std::min(b.size(), at + n); ++j) b[j] = static_cast<uint8_t>(~b[j]);
        } else {  // cut short at a random length
            b.resize(rng() % b.size());
        }
        INFO("mutation " << i);
        kt::test::write_file(fx.cache, b);
        const Loaded r = load_and_run(fx.model, true);
        INFO(r.log);
        REQUIRE(r.status == KT_STATUS_OK);
        CHECK(contains(r.log, "refused"));
        CHECK(r.logits == fx.reference);
    }
}

TEST_CASE("pack cache: a cache that cannot be written leaves the load as it was") {
    Fixture fx;
    // Root may write anywhere it has a directory: a missing directory and a path below a regular file fail for
    // every user.
    for (const std::string &path : {fx.dir.file("missing/dir/m.ktpack"), fx.model + "/m.ktpack"}) {
        INFO(path);
        const Loaded r = load_and_run(fx.model, true, path.c_str());
        INFO(r.log);
        REQUIRE(r.status == KT_STATUS_OK);
        CHECK(contains(r.log, "not written"));
        CHECK(r.logits == fx.reference);
    }
}

TEST_CASE("pack cache: one that passes its checks but not what the loader asks for is left mid-way and rewritten") {
    Fixture fx;
    REQUIRE(load_and_run(fx.model, true).status == KT_STATUS_OK);
    std::vector<uint8_t> b = kt::test::read_file(fx.cache);
    // Two entries' names swapped (both tensors exist, the sizes still tile the file): the first take() that meets one
    // sees another tensor than it asks for.
    const uint64_t e0 = PackCache::kHeaderBytes + PackCache::kEntName, e1 = e0 + PackCache::kEntryBytes;
    std::vector<uint8_t> name0(b.begin() + static_cast<long>(e0), b.begin() + static_cast<long>(e0 + PackCache::kNameBytes));
    std::copy(b.begin() + static_cast<long>(e1), b.begin() + static_cast<long>(e1 + PackCache::kNameBytes), b.begin() + static_cast<long>(e0));
    std::copy(name0.begin(), name0.end(), b.begin() + static_cast<long>(e1));
    reseal_table(&b);
    kt::test::write_file(fx.cache, b);
    const Loaded r = load_and_run(fx.model, true);
    INFO(r.log);
    CHECK(contains(r.log, "valid"));
    CHECK(contains(r.log, "the model asks for"));
    CHECK(contains(r.log, "written"));
    CHECK(r.logits == fx.reference);
    const Loaded again = load_and_run(fx.model, true);
    CHECK(contains(again.log, ": used"));
    CHECK(again.logits == fx.reference);
}

TEST_CASE("pack cache: processes loading at once each get a whole cache, and share it once it exists") {
    kt_log_set(capture, nullptr, KT_LOG_INFO);
    TempDir dir;
    const std::string model = dir.file("q8.gguf"), cache = model + ".ktpack";
    // Random Q8_0 (cheap to make): the experts, which the cache holds, are most of the file.
    kt::test::TinyModel spec;
    spec.weight_type = KT_TYPE_Q8_0;
    spec.n_embd = 256;
    spec.n_ff = 256;
    spec.n_expert = 32;
    spec.n_vocab = 512;
    kt::test::write_tiny_model_file_or_fail(spec, model);
    // The logits of the child's own prompt without a cache, from a child of the same kind.
    const std::string plain_logits = dir.file("logits.plain");
    const kt::test::ProgramRun plain =
        kt::test::run_program(std::string(KT_LOAD_MEMORY_CHILD) + " '" + model + "' mmap '" + plain_logits + "'");
    INFO(plain.all());
    REQUIRE(plain.exit_code == 0);
    const std::vector<uint8_t> expected = kt::test::read_file(plain_logits);
    REQUIRE(!expected.empty());
    auto run_two = [&](const char *tag) {
        const std::string a = dir.file(std::string("logits.a.") + tag), b = dir.file(std::string("logits.b.") + tag);
        const std::string child = std::string(KT_LOAD_MEMORY_CHILD) + " '" + model + "' cache ";
        const kt::test::ProgramRun r = kt::test::run_program(
            child + "'" + a + "' > '" + a + ".out' 2>&1 & pa=$!; " + child + "'" + b + "' > '" + b + ".out' 2>&1 & pb=$!; " +
            "wait $pa; ra=$?; wait $pb; rb=$?; cat '" + a + ".out' '" + b + ".out'; [ $ra -eq 0 ] && [ $rb -eq 0 ]");
        INFO(r.all());
        REQUIRE(r.exit_code == 0);
        CHECK(kt::test::read_file(a) == expected);
        CHECK(kt::test::read_file(b) == expected);
        return r.out;
    };
    // Both write (each to a file of its own, renamed over the other's): whichever wins is whole.
    const std::string writers = run_two("write");
    INFO(writers);
    REQUIRE(exists(cache));
    CHECK(contains(writers, "written"));
    const std::vector<uint8_t> after_writers = kt::test::read_file(cache);
    // Both read the one that won.
    const std::string readers = run_two("read");
    INFO(readers);
    CHECK_FALSE(contains(readers, "refused"));
    CHECK(contains(readers, ": used"));
    CHECK(kt::test::read_file(cache) == after_writers);
    // The readers never touched the model file's pages of the tensors the cache holds: what is resident of it is
    // the header, the embedding and the norms (each with the kernel's fault-around of up to 64 KiB), a small part.
    struct stat st;
    REQUIRE(stat(model.c_str(), &st) == 0);
    long most = -1;
    for (size_t at = readers.find("model_rss_kb "); at != std::string::npos; at = readers.find("model_rss_kb ", at + 1))
        most = std::max(most, std::stol(readers.substr(at + 13)));
    INFO("model file " << st.st_size / 1024 << " KiB, at most " << most << " KiB of it resident in a reader");
    CHECK(most >= 0);
    CHECK(static_cast<double>(most) < 0.25 * static_cast<double>(st.st_size) / 1024.0);
    kt_log_set(nullptr, nullptr, KT_LOG_INFO);
}

TEST_CASE("pack cache: parameters") {
    TempDir dir;
    const std::string model = dir.file("m.gguf");
    kt::test::write_tiny_model_file_or_fail(kt::test::TinyModel(), model);
    kt_model_params mp;
    kt_model_params_init(&mp);
    CHECK(mp.pack_cache == 0);
    CHECK(mp.pack_cache_path == nullptr);
    kt_model *m = nullptr;
    mp.pack_cache = 1;  // without prepare
    CHECK(kt_model_load(model.c_str(), &mp, &m, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    mp.prepare = 1;
    mp.pack_cache = 2;
    CHECK(kt_model_load(model.c_str(), &mp, &m, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    mp.pack_cache = 1;
    mp.reserved1 = 1;
    CHECK(kt_model_load(model.c_str(), &mp, &m, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(m == nullptr);
    CHECK_FALSE(exists(model + ".ktpack"));
}
