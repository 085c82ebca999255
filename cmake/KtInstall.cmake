# Installation: headers, libkt.a, a CMake package (find_package(kt) -> kt::kt) and a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(FILES "${PROJECT_SOURCE_DIR}/include/kt.h" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kt EXPORT ktTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(KT_BUILD_SHARED)
  install(TARGETS kt_shared EXPORT ktTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(EXPORT ktTargets NAMESPACE kt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kt)

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/kt-config.cmake.in"
  "${PROJECT_BINARY_DIR}/kt-config.cmake" INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kt)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/kt-config-version.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES "${PROJECT_BINARY_DIR}/kt-config.cmake" "${PROJECT_BINARY_DIR}/kt-config-version.cmake"
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kt)

set(KT_PC_CUDA_LIBS "")
if(KT_CUDA_ENABLED)
  set(KT_PC_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lrt")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/kt.pc.in" "${PROJECT_BINARY_DIR}/kt.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/kt.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
