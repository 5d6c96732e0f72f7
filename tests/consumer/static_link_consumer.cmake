# Links the C++ consumer program (tests/consumer/consumer.cpp) against an installed prefix by the
# library's file name alone, statically, as a Makefile would: -Wl,-Bstatic -lngramspec_cpp. The
# C++ library and the C ABI have names of their own: -lngramspec, the C ABI's name, has no static
# archive, so `-Wl,-Bstatic -lngramspec` must not link (it once linked the C++ library).
#
# cmake -DPREFIX=<prefix> -DLIBDIR=lib -DINCLUDEDIR=include -DCXX_COMPILER=<c++> "-DCXX_FLAGS=<flags>"
#       -DSOURCE=<consumer.cpp> -DBINARY_DIR=<dir> -P static_link_consumer.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var PREFIX LIBDIR INCLUDEDIR CXX_COMPILER SOURCE BINARY_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "static_link_consumer.cmake: ${var} is not set")
  endif()
endforeach()

foreach(file libngramspec_cpp.a libngramspec.so)
  if(NOT EXISTS "${PREFIX}/${LIBDIR}/${file}")
    message(FATAL_ERROR "${PREFIX}/${LIBDIR}/${file} is not installed")
  endif()
endforeach()
if(EXISTS "${PREFIX}/${LIBDIR}/libngramspec.a")
  message(FATAL_ERROR "${PREFIX}/${LIBDIR}/libngramspec.a is installed: -lngramspec would name two libraries")
endif()

separate_arguments(cxx_flags UNIX_COMMAND "${CXX_FLAGS}")
file(MAKE_DIRECTORY "${BINARY_DIR}")
# link(result library): links the program with -Wl,-Bstatic -l<library>.
function(link out library)
  set(program "${BINARY_DIR}/consumer_static_${library}")
  set(command ${CXX_COMPILER} ${cxx_flags} -std=c++20 -Wall -Wextra -Wpedantic -Werror "-I${PREFIX}/${INCLUDEDIR}"
    "${SOURCE}" "-L${PREFIX}/${LIBDIR}" -Wl,-Bstatic -l${library} -Wl,-Bdynamic -pthread -o "${program}")
  list(JOIN command " " command_text)
  message(STATUS "${command_text}")
  execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  set(${out} "${result}" PARENT_SCOPE)
  set(${out}_output "${command_text}\n${output}" PARENT_SCOPE)
  set(${out}_program "${program}" PARENT_SCOPE)
endfunction()

link(cpp ngramspec_cpp)
if(NOT cpp EQUAL 0)
  message(FATAL_ERROR "the static link by name failed (${cpp}):\n${cpp_output}")
endif()
execute_process(COMMAND ${cpp_program} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${cpp_program} failed (${result}):\n${output}${errors}")
endif()
message(STATUS "${output}")

link(c_abi ngramspec)
if(c_abi EQUAL 0)
  message(FATAL_ERROR "-Wl,-Bstatic -lngramspec linked a static library: it must name only the C ABI's shared one")
endif()
message(STATUS "-Wl,-Bstatic -lngramspec links nothing, as it must")
