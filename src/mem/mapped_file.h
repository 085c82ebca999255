// MappedFile: a read-only view of a whole file, either memory-mapped or read into an owned buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"

namespace kt::mem {

class MappedFile {
public:
    // Called while reading without mmap: bytes done so far and total. Return false to cancel.
    using ReadProgress = std::function<bool(uint64_t done, uint64_t total)>;

    MappedFile() = default;
    ~MappedFile();
    MappedFile(MappedFile &&other) noexcept;
    MappedFile &operator=(MappedFile &&other) noexcept;
    MappedFile(const MappedFile &) = delete;
    MappedFile &operator=(const MappedFile &) = delete;

    // use_mmap: map the file read-only (MAP_PRIVATE); otherwise read it into a heap buffer in chunks,
    // reporting progress. An empty file is valid and has data() == nullptr.
    static Status open(const std::string &path, bool use_mmap, const ReadProgress &progress, MappedFile *out);

    // Maps the file read-only and shared (MAP_SHARED): every process mapping it reads the same page-cache pages,
    // and none can change them through this mapping. For files kt itself wrote (the packed cache); an empty file
    // is an error here.
    static Status open_shared(const std::string &path, MappedFile *out);

    // Wraps caller-owned bytes (tests, fuzzing): nothing is copied or freed.
    static MappedFile borrow(const uint8_t *data, uint64_t size);

    const uint8_t *data() const { return data_; }
    uint64_t size() const { return size_; }
    bool is_mapped() const { return mapped_; }

    // Touches every page of [offset, offset + length) so that later reads do not fault. For mapped files only;
    // a no-op otherwise.
    void prefetch(uint64_t offset, uint64_t length) const;
    // Starts reading [offset, offset + length) in the background (MADV_WILLNEED: the kernel's large readahead, as a
    // sequential read() gets), so that later faults find its pages in the page cache. No-op unless mapped.
    void will_need(uint64_t offset, uint64_t length) const;
    // Maps the pages of [offset, offset + length) into this process in one call (MADV_POPULATE_READ, reading them
    // from disk first where needed): far cheaper than faulting them in one by one. False where the kernel cannot
    // (before Linux 5.14); the pages then come in on first touch as usual.
    bool populate(uint64_t offset, uint64_t length) const;
    // Whether every page of [offset, offset + length) is in the page cache now (mincore), so that touching it costs
    // no disk read. False when unknown (not mapped, or the call fails).
    bool resident(uint64_t offset, uint64_t length) const;

    // Gives back the resident pages wholly inside [begin, begin + length) once their bytes have been copied out
    // (repacked at load), so that a model does not hold its packed copy and the mapping side by side. Pages only
    // partly inside the range stay: a neighbouring tensor may still need them. Safe for any reader at any time: the
    // mapping is read-only and private, so its pages are never dirty and a later read faults them in again from the
    // file. A no-op for a file read into memory or borrowed bytes (dropping those would lose them) and for ranges
    // outside the mapping. Returns the bytes given back.
    uint64_t drop_pages(const uint8_t *begin, uint64_t length) const;

private:
    void release();

    const uint8_t *data_ = nullptr;
    uint64_t size_ = 0;
    bool mapped_ = false;
    bool owned_ = false;
};

}  // namespace kt::mem
