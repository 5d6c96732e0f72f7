# Builds the C ABI's consumer program (tests/consumer/c_api/consumer.c) against an installed
# prefix with nothing but the C compiler and `pkg-config --cflags --libs ngramspec`, as a Makefile
# would, and runs it without LD_LIBRARY_PATH: the flags carry an rpath to the prefix's library
# folder, which the loader does not search by itself.
#
# cmake -DPKG_CONFIG=<pkg-config> -DPREFIX=<prefix> -DLIBDIR=lib -DC_COMPILER=<cc> "-DC_FLAGS=<flags>"
#       ["-DLINK_FLAGS=<flags after the libraries>"] -DSOURCE=<consumer.c> -DBINARY_DIR=<dir>
#       -DEXPECTED_VERSION=<x.y.z> -P pkg_config_consumer.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var PKG_CONFIG PREFIX LIBDIR C_COMPILER SOURCE BINARY_DIR EXPECTED_VERSION)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "pkg_config_consumer.cmake: ${var} is not set")
  endif()
endforeach()

set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
function(pkg_config out)
  execute_process(COMMAND ${PKG_CONFIG} ${ARGN} ngramspec
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "PKG_CONFIG_PATH=$ENV{PKG_CONFIG_PATH} ${PKG_CONFIG} ${ARGN} ngramspec failed (${result}):\n${errors}")
  endif()
  set(${out} "${output}" PARENT_SCOPE)
endfunction()

pkg_config(version --modversion)
if(NOT version STREQUAL EXPECTED_VERSION)
  message(FATAL_ERROR "pkg-config says ngramspec ${version}; the build is ${EXPECTED_VERSION}")
endif()
# The .pc file finds the prefix it was installed to (it is relocatable).
pkg_config(libdir --variable=libdir)
file(REAL_PATH "${libdir}" libdir)
file(REAL_PATH "${PREFIX}/${LIBDIR}" expected_libdir)
if(NOT libdir STREQUAL expected_libdir)
  message(FATAL_ERROR "pkg-config's libdir is ${libdir}; expected ${expected_libdir}")
endif()

pkg_config(flags --cflags --libs)
set(rpath "")
if(flags MATCHES "-Wl,-rpath,([^ ]+)")
  file(REAL_PATH "${CMAKE_MATCH_1}" rpath)
endif()
if(NOT rpath STREQUAL expected_libdir)
  message(FATAL_ERROR "pkg-config --libs ngramspec carries no -Wl,-rpath to ${expected_libdir}: ${flags}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
separate_arguments(c_flags UNIX_COMMAND "${C_FLAGS}")
separate_arguments(link_flags UNIX_COMMAND "${LINK_FLAGS}")
file(MAKE_DIRECTORY "${BINARY_DIR}")
set(program "${BINARY_DIR}/c_api_consumer_pkg_config")
set(command ${C_COMPILER} ${c_flags} -std=c11 -Wall -Wextra -pedantic -Werror "${SOURCE}" ${flags} ${link_flags}
  -o "${program}")
list(JOIN command " " command_text)
message(STATUS "${command_text}")
execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the pkg-config build failed (${result}):\n${command_text}\n${output}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH "${program}"
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${program} failed (${result}):\n${output}${errors}")
endif()
message(STATUS "${output}")
