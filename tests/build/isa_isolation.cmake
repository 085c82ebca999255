# Checks that code compiled for one ISA cannot leak into code that runs on any CPU.
#
# ISA-specific translation units are compiled with -mavx2 / -mavx512* flags. If such a unit emits an out-of-line
# copy of an inline function or template that other units also emit (a weak "W" symbol: std::vector<float> code,
# a header helper ...), the linker keeps one copy, possibly the AVX-512 one, and a CPU without AVX-512 then dies
# with SIGILL in code that was supposed to be portable. So: no weak code symbol may be defined both by an ISA unit
# and by any other unit of libkt, and ISA units may not define weak copies of standard-library code at all (the
# host program links its own, and which copy wins depends on link order). Weak data, such as a constant table, is
# harmless.
#
# Usage: cmake -DISA_OBJECTS="a.o;b.o" -DOTHER_OBJECTS="c.o;..." -DNM=nm -P isa_isolation.cmake
cmake_minimum_required(VERSION 3.25)

function(weak_code_symbols objects out)
  set(symbols "")
  foreach(object IN LISTS objects)
    execute_process(COMMAND ${NM} --defined-only "${object}" OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "nm failed on ${object}")
    endif()
    string(REGEX MATCHALL "[0-9a-f]+ W [^\n]+" lines "${listing}")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[0-9a-f]+ W " "" symbol "${line}")
      list(APPEND symbols "${symbol}")
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES symbols)
  set(${out} "${symbols}" PARENT_SCOPE)
endfunction()

list(FILTER OTHER_OBJECTS EXCLUDE REGEX "avx2|avx512")
weak_code_symbols("${ISA_OBJECTS}" isa_symbols)
weak_code_symbols("${OTHER_OBJECTS}" other_symbols)
list(LENGTH ISA_OBJECTS n_isa)
list(LENGTH OTHER_OBJECTS n_other)
set(shared "")
foreach(symbol IN LISTS isa_symbols)
  if(symbol IN_LIST other_symbols OR symbol MATCHES "^_ZN?K?(St|9__gnu_cxx)")
    list(APPEND shared "${symbol}")
  endif()
endforeach()
if(shared)
  list(JOIN shared "\n  " shown)
  message(FATAL_ERROR "weak code symbols defined by ISA-specific objects and by portable ones "
                      "(give them internal linkage, e.g. an anonymous namespace, in the ISA units):\n  ${shown}")
endif()
list(LENGTH isa_symbols n_symbols)
message(STATUS "isa isolation: ${n_isa} ISA objects (${n_symbols} weak code symbols) share none with ${n_other} portable objects")
