# Every dependency comes from Debian's archive. A missing one stops configuration with the exact command
# that installs it, instead of a cryptic error ten lines later.

set(KT_APT_PACKAGES_ALL
  "cmake g++ pkg-config libhwloc-dev libxbyak-dev libzydis-dev catch2 libbenchmark-dev python3 unicode-data cargo golang-go python3-numpy libcpp-httplib-dev nlohmann-json3-dev clang libclang-rt-dev"
  CACHE INTERNAL "Everything a full kt build needs from Debian")

function(kt_missing_dependency what package)
  message(FATAL_ERROR
    "kt: ${what} was not found. Install it with:\n"
    "    apt-get install -y ${package}\n"
    "(or everything kt can use: apt-get install -y ${KT_APT_PACKAGES_ALL})")
endfunction()

find_package(Threads REQUIRED)

find_package(PkgConfig QUIET)
if(NOT PKG_CONFIG_FOUND)
  kt_missing_dependency("pkg-config" "pkg-config")
endif()

# hwloc: NUMA topology, thread and memory binding.
pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc>=2.0)
if(NOT HWLOC_FOUND)
  kt_missing_dependency("hwloc >= 2.0" "libhwloc-dev")
endif()

# xbyak: header-only x86 JIT assembler for the run-time generated kernels.
find_package(xbyak CONFIG QUIET)
if(NOT xbyak_FOUND)
  kt_missing_dependency("xbyak" "libxbyak-dev")
endif()

if(KT_BUILD_TESTS)
  find_package(Catch2 2 CONFIG QUIET)
  if(NOT Catch2_FOUND)
    kt_missing_dependency("Catch2 (tests)" "catch2")
  endif()
  # Zydis decodes the bytes our JIT emits, so the AMX tile machine can run them without AMX hardware.
  find_package(zydis CONFIG QUIET)
  if(NOT zydis_FOUND)
    kt_missing_dependency("Zydis (tests: AMX tile machine)" "libzydis-dev")
  endif()
endif()

# The tokenizer's Unicode tables are generated from Debian's unicode-data and checked in, so building needs
# neither it nor Python; when both are present the tests check that the checked-in tables are up to date.
if(KT_BUILD_TESTS)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(KT_UCD_DIR "/usr/share/unicode" CACHE PATH "Unicode Character Database (Debian's unicode-data)")
  if(NOT Python3_Interpreter_FOUND OR NOT EXISTS "${KT_UCD_DIR}/UnicodeData.txt")
    message(STATUS "kt: python3 or ${KT_UCD_DIR}/UnicodeData.txt missing: the unicode table check is left out "
                   "(apt-get install -y python3 unicode-data)")
  endif()
endif()

# kt-server: cpp-httplib (Debian builds it as a shared library, with OpenSSL, zlib and Brotli; its header must be
# compiled with the same flags, which its pkg-config file gives) and nlohmann-json (header-only).
if(KT_BUILD_SERVER)
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET cpp-httplib>=0.11)
  if(NOT HTTPLIB_FOUND)
    kt_missing_dependency("cpp-httplib (kt-server)" "libcpp-httplib-dev")
  endif()
  find_package(nlohmann_json 3.10 CONFIG QUIET)
  if(NOT nlohmann_json_FOUND)
    kt_missing_dependency("nlohmann-json (kt-server)" "nlohmann-json3-dev")
  endif()
endif()

if(KT_BUILD_BENCH)
  find_package(benchmark CONFIG QUIET)
  if(NOT benchmark_FOUND)
    kt_missing_dependency("Google Benchmark (bench/)" "libbenchmark-dev")
  endif()
endif()

# CUDA is optional. AUTO turns it on when the toolkit's nvcc is present; OFF always builds.
set(KT_CUDA_ENABLED OFF)
if(KT_WITH_CUDA STREQUAL "AUTO" OR KT_WITH_CUDA)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS "/usr/local/cuda/bin/nvcc")
    set(CMAKE_CUDA_COMPILER "/usr/local/cuda/bin/nvcc" CACHE FILEPATH "nvcc")
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_80 code runs natively on every 8.x GPU (A100, RTX 30/40); compute_90 PTX is compiled by the driver for
    # Hopper and anything newer. Override with -DCMAKE_CUDA_ARCHITECTURES=...
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80;90-virtual")
    endif()
    # CMake 3.25 does not know that nvcc 13 accepts C++20; the CUDA sources need only C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(KT_CUDA_ENABLED ON)
  elseif(NOT KT_WITH_CUDA STREQUAL "AUTO")
    message(FATAL_ERROR "kt: KT_WITH_CUDA=ON but no CUDA compiler was found (nvcc from the CUDA toolkit)")
  endif()
endif()
message(STATUS "kt: CUDA backend: ${KT_CUDA_ENABLED}")
