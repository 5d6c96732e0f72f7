# The install path python/README.md gives, as a user follows it: configures a fresh tree with the
# configure preset PRESET (CMakePresets.json, into BUILD_DIR rather than build/PRESET), builds the
# targets its build preset of the same name builds, then installs the tree to a fresh prefix and
# imports the installed package from there (install_and_import.cmake). It fails where the preset's
# build leaves out something its install rules install, or the package does not import.
#
# cmake -DSOURCE_DIR=<source tree> -DPRESET=<name> -DBUILD_DIR=<fresh build tree> -DPREFIX=<prefix>
#       -DPYTHON=<python3> -DPYTHONDIR=<package dir, relative to the prefix> -P preset_install_and_import.cmake

cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR PRESET BUILD_DIR PREFIX PYTHON PYTHONDIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "preset_install_and_import.cmake: ${var} is not set")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${SOURCE_DIR}
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}):\n${output}")
  endif()
endfunction()

# The build preset's targets, as `cmake --build --preset ${PRESET}` builds them (none listed: all).
file(READ ${SOURCE_DIR}/CMakePresets.json presets)
string(JSON count LENGTH "${presets}" buildPresets)
math(EXPR last "${count} - 1")
set(found OFF)
set(targets)
foreach(i RANGE ${last})
  string(JSON name GET "${presets}" buildPresets ${i} name)
  if(name STREQUAL PRESET)
    set(found ON)
    string(JSON configure GET "${presets}" buildPresets ${i} configurePreset)
    string(JSON target_count ERROR_VARIABLE no_targets LENGTH "${presets}" buildPresets ${i} targets)
    if(NOT no_targets AND target_count GREATER 0)
      math(EXPR last_target "${target_count} - 1")
      foreach(t RANGE ${last_target})
        string(JSON target GET "${presets}" buildPresets ${i} targets ${t})
        list(APPEND targets ${target})
      endforeach()
    endif()
  endif()
endforeach()
if(NOT found)
  message(FATAL_ERROR "CMakePresets.json has no build preset '${PRESET}'")
endif()
set(target_args)
if(targets)
  set(target_args --target ${targets})
endif()

file(REMOVE_RECURSE ${BUILD_DIR})
# Only the binary folder differs from the preset's; the shared data is not needed to build.
run("cmake --preset ${configure}" ${CMAKE_COMMAND} --preset ${configure} -B ${BUILD_DIR})
run("cmake --build (the targets of build preset ${PRESET}: ${targets})" ${CMAKE_COMMAND} --build ${BUILD_DIR}
  ${target_args})
run("cmake --install ${BUILD_DIR} and import" ${CMAKE_COMMAND} -DBUILD_DIR=${BUILD_DIR} -DPREFIX=${PREFIX}
  -DPYTHON=${PYTHON} -DPYTHONDIR=${PYTHONDIR} -P ${CMAKE_CURRENT_LIST_DIR}/install_and_import.cmake)
message(STATUS "preset ${PRESET}: configured, built (${targets}), installed to ${PREFIX} and imported")
