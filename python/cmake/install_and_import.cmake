# Installs a built ngramspec tree to a fresh prefix and imports the installed Python package from
# there, with no NGRAMSPEC_LIBRARY, no LD_LIBRARY_PATH and no source tree on the path: the package
# must find the library of that prefix (through the link installed beside it) and drive it.
#
# cmake -DBUILD_DIR=<build tree> -DPREFIX=<prefix> -DCONFIG=<config> -DPYTHON=<python3>
#       -DPYTHONDIR=<package dir, relative to the prefix> [-DENVIRONMENT=A=1|B=2] -P install_and_import.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR PREFIX PYTHON PYTHONDIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_and_import.cmake: ${var} is not set")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/install_fresh_prefix.cmake)
ngramspec_install_fresh_prefix()

set(package "${PREFIX}/${PYTHONDIR}/ngramspec")
if(NOT EXISTS "${package}/__init__.py")
  message(FATAL_ERROR "the package was not installed to ${package}")
endif()

# The check runs from the prefix, so neither the source tree nor the build tree is on sys.path.
set(check [=[
import os, sys
prefix = os.path.realpath(sys.argv[1])
import ngramspec
package = os.path.realpath(os.path.dirname(ngramspec.__file__))
library = os.path.realpath(ngramspec.library_path())
assert package.startswith(prefix + os.sep), f"imported {package}, not the installed package under {prefix}"
assert library.startswith(prefix + os.sep), f"loaded {library}, not the library installed under {prefix}"
assert os.path.dirname(ngramspec.library_path()) == os.path.dirname(ngramspec.__file__), ngramspec.library_path()
spec = ngramspec.BatchSpeculator(max_sequences=2)
spec.begin(1, [3, 4, 5, 3, 4, 5, 3, 4], max_new_tokens=8)
drafts, offsets = spec.propose([1])
spec.accept([1], [5], [0, 1])
drafts, offsets = spec.propose([1])
assert list(drafts) == [3, 4, 5, 3], list(drafts)
print(f"ngramspec {ngramspec.__version__}: {package} loaded {ngramspec.library_path()} -> {library}")
]=])

set(environment --unset=NGRAMSPEC_LIBRARY --unset=PYTHONPATH --unset=LD_LIBRARY_PATH
  "PYTHONPATH=${PREFIX}/${PYTHONDIR}" PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1)
if(ENVIRONMENT)
  string(REPLACE "|" ";" extra "${ENVIRONMENT}")
  list(APPEND environment ${extra})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${environment} ${PYTHON} -c "${check}" "${PREFIX}"
  WORKING_DIRECTORY "${PREFIX}"
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "importing the installed package failed (${result}):\n${output}")
endif()
message(STATUS "${output}")
