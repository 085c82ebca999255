// Writes the hostile-file generator's cases, the files other readers refuse, and the valid base into a directory:
// the fuzz corpus seed.
#include <cctype>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "support/hostile_gguf.h"

static bool write_bytes(const std::string &path, const std::vector<uint8_t> &bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return out.good();
}

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    if (!write_bytes(dir + "/valid-base.gguf", kt::test::small_valid_gguf().serialize())) return 1;
    int n = 0;
    for (const auto &c : kt::test::hostile_gguf_cases()) {
        std::string name;
        for (char ch : c.name) name += (std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-');
        if (!write_bytes(dir + "/hostile-" + name + ".gguf", c.bytes)) return 1;
        ++n;
    }
    for (const auto &c : kt::test::interop_gguf_cases()) {
        if (!write_bytes(dir + "/interop-" + c.name + ".gguf", c.bytes)) return 1;
        ++n;
    }
    std::printf("wrote %d hostile and interoperability cases and the valid base to %s\n", n, dir.c_str());
    return 0;
}
