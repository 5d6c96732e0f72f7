# Installs a built ngramspec tree to a fresh prefix and checks that the prefix holds exactly
# what a consumer needs: every public header (detail/ and the C ABI's ngramspec.h included), the
# libraries, the package files (and the C ABI's pkg-config file) and the license; nothing from
# tests, benchmarks or examples.
#
# cmake -DBUILD_DIR=<build tree> -DPREFIX=<prefix> -DCONFIG=<config> -DSOURCE_DIR=<source tree>
#       -DINCLUDEDIR=include -DLIBDIR=lib -DDATADIR=share -DLIBRARY_FILES=<file names>
#       [-DEXTRA_FILES=<paths under the prefix>] -P install_and_check.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR PREFIX SOURCE_DIR INCLUDEDIR LIBDIR DATADIR LIBRARY_FILES)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_and_check.cmake: ${var} is not set")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/install_fresh_prefix.cmake)
ngramspec_install_fresh_prefix()

set(package_dir ${LIBDIR}/cmake/ngramspec)
file(GLOB_RECURSE headers RELATIVE ${SOURCE_DIR}/include ${SOURCE_DIR}/include/*.hpp ${SOURCE_DIR}/include/*.h)
list(FILTER headers INCLUDE REGEX "^ngramspec/")
set(expected)
foreach(header IN LISTS headers)
  list(APPEND expected ${INCLUDEDIR}/${header})
endforeach()
foreach(library IN LISTS LIBRARY_FILES)
  list(APPEND expected ${LIBDIR}/${library})
endforeach()
# The Python package and its link to the library (python/CMakeLists.txt lists them).
if(EXISTS "${BUILD_DIR}/python/installed_files.txt")
  file(STRINGS "${BUILD_DIR}/python/installed_files.txt" python_files)
  list(APPEND expected ${python_files})
endif()
list(APPEND expected ${EXTRA_FILES})
list(APPEND expected
  ${package_dir}/ngramspecConfig.cmake
  ${package_dir}/ngramspecConfigVersion.cmake
  ${package_dir}/ngramspecTargets.cmake
  ${DATADIR}/doc/ngramspec/LICENSE)

file(GLOB_RECURSE installed LIST_DIRECTORIES false RELATIVE ${PREFIX} ${PREFIX}/*)
# The per-configuration part of the exported targets: ngramspecTargets-debug.cmake and the like.
set(per_config ${installed})
list(FILTER per_config INCLUDE REGEX "^${package_dir}/ngramspecTargets-[^/]+\\.cmake$")
if(NOT per_config)
  message(FATAL_ERROR "no ${package_dir}/ngramspecTargets-<config>.cmake was installed")
endif()
list(REMOVE_ITEM installed ${per_config})

set(missing ${expected})
list(REMOVE_ITEM missing ${installed})
set(unexpected ${installed})
list(REMOVE_ITEM unexpected ${expected})
# Command-line tools may install to bin/; nothing else beyond the expected files may appear.
list(FILTER unexpected EXCLUDE REGEX "^bin/")
if(missing OR unexpected)
  list(JOIN missing "\n  " missing_text)
  list(JOIN unexpected "\n  " unexpected_text)
  message(FATAL_ERROR "install layout under ${PREFIX} is wrong\n"
                      "missing:\n  ${missing_text}\nunexpected:\n  ${unexpected_text}")
endif()
set(detail_headers ${installed})
list(FILTER detail_headers INCLUDE REGEX "^${INCLUDEDIR}/ngramspec/detail/.+\\.hpp$")
if(NOT detail_headers)
  message(FATAL_ERROR "the detail/ headers the public headers include were not installed")
endif()
list(LENGTH installed count)
message(STATUS "installed ${count} files to ${PREFIX}; layout as expected")
