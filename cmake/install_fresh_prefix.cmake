# For the install tests' scripts (cmake -P): installs the build tree BUILD_DIR to PREFIX, emptied
# first, with --config CONFIG when CONFIG is set; stops with cmake --install's output when it fails.

function(ngramspec_install_fresh_prefix)
  file(REMOVE_RECURSE "${PREFIX}")
  set(config_args)
  if(CONFIG)
    set(config_args --config ${CONFIG})
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} ${config_args}
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "cmake --install failed (${result}):\n${output}")
  endif()
endfunction()
