# Checks what the C ABI's shared library exports: exactly the functions ngramspec.h declares
# (every defined dynamic symbol starts with ngramspec_, none is missing), and its SONAME.
#
# cmake -DLIBRARY=<libngramspec.so> -DHEADER=<ngramspec.h> -DNM=<nm> -DREADELF=<readelf>
#       -DEXPECTED_SONAME=<libngramspec.so.MAJOR.MINOR> -P check_symbols.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var LIBRARY HEADER NM READELF EXPECTED_SONAME)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_symbols.cmake: ${var} is not set")
  endif()
endforeach()

# The functions the header declares: NGRAMSPEC_API <return type> ngramspec_<name>(.
file(READ "${HEADER}" header)
string(REGEX MATCHALL "NGRAMSPEC_API[^(;#]*\\(" declarations "${header}")
set(declared)
foreach(declaration IN LISTS declarations)
  if(declaration MATCHES "[ *](ngramspec_[A-Za-z0-9_]+)\\($")
    list(APPEND declared ${CMAKE_MATCH_1})
  endif()
endforeach()
list(REMOVE_DUPLICATES declared)
list(LENGTH declared declared_count)
if(declared_count EQUAL 0)
  message(FATAL_ERROR "found no NGRAMSPEC_API function in ${HEADER}")
endif()

# The library's defined dynamic symbols: "<value> <type> <name>[@version]" per line.
execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed (${result}):\n${errors}")
endif()
string(REPLACE "\n" ";" lines "${output}")
# What the linker itself may define in any shared object.
set(linker_symbols _init _fini _edata _end __bss_start _DYNAMIC _GLOBAL_OFFSET_TABLE_)
set(exported)
set(foreign)
foreach(line IN LISTS lines)
  if(NOT line MATCHES "([^ ]+)$")
    continue()
  endif()
  string(REGEX REPLACE "@.*$" "" symbol "${CMAKE_MATCH_1}")
  if(symbol IN_LIST linker_symbols)
    continue()
  elseif(symbol MATCHES "^ngramspec_")
    list(APPEND exported ${symbol})
  else()
    list(APPEND foreign "${line}")
  endif()
endforeach()

set(missing ${declared})
if(exported)
  list(REMOVE_ITEM missing ${exported})
endif()
set(undeclared ${exported})
list(REMOVE_ITEM undeclared ${declared})
if(foreign OR missing OR undeclared)
  list(JOIN foreign "\n  " foreign_text)
  list(JOIN missing "\n  " missing_text)
  list(JOIN undeclared "\n  " undeclared_text)
  message(FATAL_ERROR "${LIBRARY} exports the wrong symbols\n"
                      "not ngramspec_*:\n  ${foreign_text}\n"
                      "declared in ngramspec.h but not exported:\n  ${missing_text}\n"
                      "exported but not declared in ngramspec.h:\n  ${undeclared_text}")
endif()

execute_process(COMMAND ${READELF} -d ${LIBRARY}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIBRARY} failed (${result}):\n${errors}")
endif()
if(NOT output MATCHES "\\(SONAME\\)[^\n]*\\[([^]\n]+)\\]")
  message(FATAL_ERROR "${LIBRARY} has no SONAME; expected ${EXPECTED_SONAME}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL EXPECTED_SONAME)
  message(FATAL_ERROR "${LIBRARY} has SONAME ${CMAKE_MATCH_1}; expected ${EXPECTED_SONAME}")
endif()

list(LENGTH exported count)
message(STATUS "${LIBRARY}: SONAME ${CMAKE_MATCH_1}; exports the ${count} functions ngramspec.h declares and nothing else")
