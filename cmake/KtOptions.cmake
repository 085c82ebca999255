# Build options. Everything kt needs comes from Debian packages (see KtDependencies.cmake).
option(KT_BUILD_TESTS "Build the test suite" ON)
option(KT_BUILD_EXAMPLES "Build the example programs (kt-inspect, ...)" ON)
option(KT_BUILD_SERVER "Build kt-server, the OpenAI-compatible HTTP server (needs libcpp-httplib-dev, nlohmann-json3-dev)"
  ${KT_BUILD_EXAMPLES})
option(KT_BUILD_BENCH "Build the benchmarks (needs libbenchmark-dev)" ON)
option(KT_BUILD_SHARED "Also build libkt.so (C ABI only is exported)" OFF)
set(KT_TEST_BINDINGS "AUTO" CACHE STRING
  "Install, consumer-project and Rust/Go/Python binding tests (need KT_BUILD_SHARED): ON, OFF or AUTO (when found)")
set_property(CACHE KT_TEST_BINDINGS PROPERTY STRINGS ON OFF AUTO)
option(KT_BUILD_FUZZ "Build libFuzzer targets (needs clang)" OFF)
set(KT_WITH_CUDA "AUTO" CACHE STRING "CUDA backend: ON, OFF or AUTO (on when nvcc is found)")
set_property(CACHE KT_WITH_CUDA PROPERTY STRINGS ON OFF AUTO)
set(KT_SANITIZE "" CACHE STRING "Sanitizers for kt's own code, e.g. address,undefined (empty: none)")
option(KT_USE_LLD "Link with lld when the compiler can use it (Debian's lld; the test builds link some 80 programs)" ON)

# Golden data made by independent implementations; tests look here and say loudly when it is missing.
get_filename_component(_kt_default_testdata "${CMAKE_CURRENT_SOURCE_DIR}/../shared/testdata" ABSOLUTE)
set(KT_TESTDATA_DIR "${_kt_default_testdata}" CACHE PATH "Directory of the shared golden test data")
