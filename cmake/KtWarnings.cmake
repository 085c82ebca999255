# Warnings and hardening for kt's own targets only (never for dependencies).
add_library(kt_warnings INTERFACE)
target_compile_options(kt_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wshadow -Wformat=2 -Wundef -Wcast-align -Wvla>
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Woverloaded-virtual>
  # GCC 12 reports impossible memcpy overlaps inside std::string concatenation at -O2 (GCC bug 105329).
  $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>)

# Sanitizers and fuzzing instrument host C/C++ only (nvcc does not take these flags).
if(KT_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${KT_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${KT_SANITIZE})
  # The integer kernels keep their K steps rolled under instrumentation (kernels_impl.h: unrolled, a kernel
  # translation unit took minutes to compile).
  add_compile_definitions(KT_KERNELS_ROLLED)
endif()

# lld links a sanitizer build's test program in about half the time of GNU ld (0.9 s against 1.8 s for one
# ASan test, which carries the static library and CUDA's static runtime), and CI links some 150 of them. Only the
# host link: nvcc's device link keeps its own linker.
if(KT_USE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-fuse-ld=lld" KT_HAVE_LLD)
  if(KT_HAVE_LLD)
    add_link_options($<HOST_LINK:-fuse-ld=lld>)
  endif()
endif()

# Fuzzing needs coverage instrumentation in the library itself, not only in the fuzz target's own file.
# The kernels are left out of the coverage (why: cmake/fuzz-coverage-ignorelist.txt). The list is passed as a copy
# named by its hash, so that editing it changes the flags and rebuilds what it covers.
if(KT_BUILD_FUZZ)
  set(ignorelist "${PROJECT_SOURCE_DIR}/cmake/fuzz-coverage-ignorelist.txt")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${ignorelist}")
  file(SHA1 "${ignorelist}" ignorelist_hash)
  string(SUBSTRING "${ignorelist_hash}" 0 12 ignorelist_hash)
  set(ignorelist_copy "${CMAKE_BINARY_DIR}/fuzz-coverage-ignorelist-${ignorelist_hash}.txt")
  configure_file("${ignorelist}" "${ignorelist_copy}" COPYONLY)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize-coverage-ignorelist=${ignorelist_copy}>)
endif()

# Attach kt's common compile settings to a target.
function(kt_target_defaults target)
  target_link_libraries(${target} PRIVATE kt_warnings)
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endfunction()
