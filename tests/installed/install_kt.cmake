# cmake -DBUILD_DIR=... -DPREFIX=... -DLIBDIR=lib -P install_kt.cmake: a fresh `cmake --install` of the build into PREFIX, so the
# tests that use the installed kt never see files left from an earlier install.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed (${result})")
endif()
foreach(f include/kt.h ${LIBDIR}/libkt.a ${LIBDIR}/libkt.so ${LIBDIR}/cmake/kt/kt-config.cmake
          ${LIBDIR}/cmake/kt/kt-config-version.cmake ${LIBDIR}/cmake/kt/ktTargets.cmake ${LIBDIR}/pkgconfig/kt.pc)
  if(NOT EXISTS "${PREFIX}/${f}")
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()
message(STATUS "kt installed in ${PREFIX}")
