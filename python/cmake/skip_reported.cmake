# For python.skip_reported (cmake -P): configures the project in SOURCE_DIR into BINARY_DIR with a
# Python that does not exist (the library and tests only), runs its python.pytest with ctest, and
# fails unless ctest reports it skipped with the reason, rather than leaving it out unsaid.
#
# cmake -DSOURCE_DIR=<project> -DBINARY_DIR=<scratch build> -DGENERATOR=<generator>
#       -DCXX_COMPILER=<c++> -DCTEST=<ctest> -P skip_reported.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR BINARY_DIR GENERATOR CXX_COMPILER CTEST)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "skip_reported.cmake: ${var} is not set")
  endif()
endforeach()

set(python "${BINARY_DIR}/no-such-python3")
execute_process(
  COMMAND ${CMAKE_COMMAND} --fresh -S ${SOURCE_DIR} -B ${BINARY_DIR} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DNGRAMSPEC_PYTHON=${python}
    -DNGRAMSPEC_BUILD_TOOLS=OFF -DNGRAMSPEC_BUILD_BENCHMARKS=OFF -DNGRAMSPEC_BUILD_EXAMPLES=OFF
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configuring ${SOURCE_DIR} with NGRAMSPEC_PYTHON=${python} failed (${result}):\n${output}")
endif()
execute_process(COMMAND ${CTEST} --test-dir ${BINARY_DIR} -R "^python\\.pytest$" -V --no-tests=error
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
message(STATUS "${output}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "ctest failed (${result}) where python.pytest should be skipped")
endif()
foreach(expected "SKIPPED: the Python package's tests did not run: ${python} does not exist"
                 "python.pytest \\(Skipped\\)")
  if(NOT output MATCHES "${expected}")
    message(FATAL_ERROR "ctest's output does not say: ${expected}")
  endif()
endforeach()
file(REMOVE_RECURSE "${BINARY_DIR}")
