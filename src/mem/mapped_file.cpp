#include "mem/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace kt::mem {
namespace {

Status io_error(const std::string &path, const char *what, int err) {
    return Status::error(KT_STATUS_IO_ERROR, "%s: %s: %s", path.c_str(), what, std::strerror(err));
}

// An open descriptor of a regular file and its size, closed when it goes out of scope.
struct RegularFile {
    int fd = -1;
    uint64_t size = 0;
    RegularFile() = default;
    RegularFile(const RegularFile &) = delete;
    RegularFile &operator=(const RegularFile &) = delete;
    ~RegularFile() {
        if (fd >= 0) ::close(fd);
    }
};

Status open_regular(const std::string &path, RegularFile *f) {
    f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) return io_error(path, "cannot open", errno);
    struct stat st;
    if (fstat(f->fd, &st) != 0) return io_error(path, "cannot stat", errno);
    KT_RETURN_IF(!S_ISREG(st.st_mode), KT_STATUS_IO_ERROR, "%s: not a regular file", path.c_str());
    f->size = static_cast<uint64_t>(st.st_size);
    return Status::ok();
}

// Reads in 64 MiB pieces so a progress callback can report and cancel a multi-gigabyte read.
constexpr uint64_t kReadChunk = 64ull << 20;

}  // namespace

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile &&other) noexcept { *this = std::move(other); }

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
    if (this != &other) {
        release();
        data_ = other.data_;
        size_ = other.size_;
        mapped_ = other.mapped_;
        owned_ = other.owned_;
        other.data_ = nullptr;
        other.size_ = 0;
        other.mapped_ = other.owned_ = false;
    }
    return *this;
}

void MappedFile::release() {
    if (data_ && owned_) {
        if (mapped_)
            munmap(const_cast<uint8_t *>(data_), size_);
        else
            std::free(const_cast<uint8_t *>(data_));
    }
    data_ = nullptr;
    size_ = 0;
    mapped_ = owned_ = false;
}

MappedFile MappedFile::borrow(const uint8_t *data, uint64_t size) {
    MappedFile f;
    f.data_ = data;
    f.size_ = size;
    return f;
}

Status MappedFile::open(const std::string &path, bool use_mmap, const ReadProgress &progress, MappedFile *out) {
    RegularFile file;
    KT_TRY(open_regular(path, &file));
    const int fd = file.fd;
    const uint64_t size = file.size;

    MappedFile f;
    f.size_ = size;
    f.owned_ = true;
    if (size == 0) {
        *out = std::move(f);
        return Status::ok();
    }
    if (use_mmap) {
        void *p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) return io_error(path, "mmap failed", errno);
        f.data_ = static_cast<const uint8_t *>(p);
        f.mapped_ = true;
    } else {
        auto *buffer = static_cast<uint8_t *>(std::malloc(size));
        KT_RETURN_IF(!buffer, KT_STATUS_OUT_OF_MEMORY, "%s: cannot allocate %llu bytes to read the file",
                     path.c_str(), static_cast<unsigned long long>(size));
        f.data_ = buffer;  // owned by f from here on, freed on every error path
        uint64_t done = 0;
        while (done < size) {
            const uint64_t want = size - done < kReadChunk ? size - done : kReadChunk;
            const ssize_t n = pread(fd, buffer + done, want, static_cast<off_t>(done));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return io_error(path, "read failed", errno);
            KT_RETURN_IF(n == 0, KT_STATUS_IO_ERROR, "%s: file shrank while reading (at byte %llu)",
                         path.c_str(), static_cast<unsigned long long>(done));
            done += static_cast<uint64_t>(n);
            KT_RETURN_IF(progress && !progress(done, size), KT_STATUS_CANCELLED, "%s: loading cancelled",
                         path.c_str());
        }
    }
    *out = std::move(f);
    return Status::ok();
}

Status MappedFile::open_shared(const std::string &path, MappedFile *out) {
    RegularFile file;
    KT_TRY(open_regular(path, &file));
    KT_RETURN_IF(file.size == 0, KT_STATUS_IO_ERROR, "%s: empty file", path.c_str());
    const uint64_t size = file.size;
    void *p = mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd, 0);
    if (p == MAP_FAILED) return io_error(path, "mmap failed", errno);
    MappedFile f;
    f.data_ = static_cast<const uint8_t *>(p);
    f.size_ = size;
    f.mapped_ = true;
    f.owned_ = true;
    *out = std::move(f);
    return Status::ok();
}

void MappedFile::prefetch(uint64_t offset, uint64_t length) const {
    if (!mapped_ || offset >= size_) return;
    if (length > size_ - offset) length = size_ - offset;
    // Asked for as a whole first, so that a range not in the page cache is read with the kernel's large readahead
    // rather than a small synchronous read per fault; then reading one byte per page faults it in (the volatile
    // sink keeps the loads from being optimised away).
    will_need(offset, length);
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    volatile uint8_t sink = 0;
    for (uint64_t i = offset - offset % page; i < offset + length; i += page) sink = sink + data_[i];
    (void)sink;
}

void MappedFile::will_need(uint64_t offset, uint64_t length) const {
    if (!mapped_ || offset >= size_) return;
    if (length > size_ - offset) length = size_ - offset;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = offset / page * page;
    (void)madvise(const_cast<uint8_t *>(data_) + first, offset + length - first, MADV_WILLNEED);
}

bool MappedFile::resident(uint64_t offset, uint64_t length) const {
    if (!mapped_ || offset >= size_) return false;
    if (length > size_ - offset) length = size_ - offset;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = offset / page * page;
    std::vector<unsigned char> pages(static_cast<size_t>((offset + length - first + page - 1) / page));
    if (mincore(const_cast<uint8_t *>(data_) + first, offset + length - first, pages.data()) != 0) return false;
    for (unsigned char p : pages)
        if (!(p & 1)) return false;
    return true;
}

bool MappedFile::populate(uint64_t offset, uint64_t length) const {
#ifdef MADV_POPULATE_READ
    if (!mapped_ || offset >= size_) return false;
    if (length > size_ - offset) length = size_ - offset;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = offset / page * page;
    return madvise(const_cast<uint8_t *>(data_) + first, offset + length - first, MADV_POPULATE_READ) == 0;
#else
    (void)offset;
    (void)length;
    return false;
#endif
}

uint64_t MappedFile::drop_pages(const uint8_t *begin, uint64_t length) const {
    if (!mapped_ || !owned_ || begin < data_ || begin > data_ + size_ || length > size_) return 0;
    const uint64_t offset = static_cast<uint64_t>(begin - data_);
    if (length > size_ - offset) return 0;
    // The mapping starts on a page boundary, so offsets within it round like addresses.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = (offset + page - 1) / page * page, end = (offset + length) / page * page;
    if (end <= first) return 0;
    // MADV_DONTNEED cannot fail on a valid range of our own mapping; should it anyway, the pages just stay.
    if (madvise(const_cast<uint8_t *>(data_) + first, end - first, MADV_DONTNEED) != 0) return 0;
    return end - first;
}

}  // namespace kt::mem
