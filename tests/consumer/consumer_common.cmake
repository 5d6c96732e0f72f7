# Shared by the consumer projects: the program they build and the checks they make.

# Builds consumer.cpp as `target` against ngramspec::ngramspec with warnings as errors, and
# registers it as the consumer project's one test.
function(ngramspec_consumer_program target)
  add_executable(${target} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/consumer.cpp)
  target_link_libraries(${target} PRIVATE ngramspec::ngramspec)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror)
  elseif(MSVC)
    target_compile_options(${target} PRIVATE /W4 /WX)
  endif()
  # Imported include directories are SYSTEM by default, which would hide warnings in the
  # installed headers; the headers must be warning-free in a consumer's build too.
  set_target_properties(${target} PROPERTIES NO_SYSTEM_FROM_IMPORTED ON)
  add_test(NAME ${target} COMMAND ${target})
endfunction()

# Fails the configure unless ngramspec, added from `source_dir` as a subproject, defined the
# libraries alone (the C++ one, and the C ABI's, which is built only when linked): no tests,
# benchmarks, examples or install rules of its own.
function(ngramspec_check_library_only source_dir)
  get_property(subdirs DIRECTORY ${source_dir} PROPERTY SUBDIRECTORIES)
  if(subdirs)
    message(FATAL_ERROR "ngramspec as a subproject added directories it must add only when top-level: ${subdirs}")
  endif()
  get_property(targets DIRECTORY ${source_dir} PROPERTY BUILDSYSTEM_TARGETS)
  list(SORT targets)
  if(NOT targets STREQUAL "ngramspec;ngramspec_c;ngramspec_warnings")
    message(FATAL_ERROR "ngramspec as a subproject defined targets [${targets}]; "
                        "expected only [ngramspec;ngramspec_c;ngramspec_warnings]")
  endif()
  get_target_property(c_api_excluded ngramspec_c EXCLUDE_FROM_ALL)
  if(NOT c_api_excluded)
    message(FATAL_ERROR "ngramspec as a subproject builds its C ABI (ngramspec_c) though nothing links it")
  endif()
  foreach(option NGRAMSPEC_BUILD_TESTS NGRAMSPEC_BUILD_BENCHMARKS NGRAMSPEC_BUILD_EXAMPLES NGRAMSPEC_INSTALL)
    if(${option})
      message(FATAL_ERROR "${option} is ON in a subproject build; it must default to OFF there")
    endif()
  endforeach()
  foreach(alias ngramspec::ngramspec ngramspec::ngramspec_c)
    if(NOT TARGET ${alias})
      message(FATAL_ERROR "ngramspec did not define the ${alias} alias")
    endif()
  endforeach()
endfunction()
