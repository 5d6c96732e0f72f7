# Tests that consume ngramspec the three ways engines do — installed and found with
# find_package, vendored with add_subdirectory, pulled in with FetchContent — each configuring,
# building (-Werror) and running tests/consumer/consumer.cpp; the C ABI's program
# (tests/consumer/c_api/consumer.c) built against the installed package with find_package and
# with pkg-config; plus the checks that the code and demo output that the README and docs/ show
# are what the repository's code is and prints. Top-level builds only.

if(NGRAMSPEC_TOP_LEVEL)
  set(_ngramspec_consumer_source ${CMAKE_CURRENT_LIST_DIR})
  set(_ngramspec_consumer_binary ${CMAKE_CURRENT_BINARY_DIR}/consumer)
  set(_ngramspec_consumer_prefix ${_ngramspec_consumer_binary}/prefix)

  # The consumers build with this build's toolchain and flags; sanitizer flags included, so in
  # a sanitizer build they link against the instrumented library as they must.
  set(_ngramspec_consumer_args
    -G ${CMAKE_GENERATOR}
    -DCMAKE_BUILD_TYPE=$<CONFIG>
    -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
    "-DCMAKE_CXX_FLAGS=${CMAKE_CXX_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${CMAKE_EXE_LINKER_FLAGS}")
  foreach(var CMAKE_MAKE_PROGRAM CMAKE_CXX_COMPILER_LAUNCHER)
    if(${var})
      list(APPEND _ngramspec_consumer_args "-D${var}=${${var}}")
    endif()
  endforeach()
  if(CMAKE_GENERATOR_PLATFORM)
    list(APPEND _ngramspec_consumer_args -A ${CMAKE_GENERATOR_PLATFORM})
  endif()
  if(CMAKE_GENERATOR_TOOLSET)
    list(APPEND _ngramspec_consumer_args -T ${CMAKE_GENERATOR_TOOLSET})
  endif()

  # consumer.<name>.configure -> .build -> .run, chained by fixtures so that running any one
  # of them runs what it needs first. REQUIRES names a fixture the configure step needs.
  function(_ngramspec_consumer_test name)
    cmake_parse_arguments(PARSE_ARGV 1 arg "" "REQUIRES" "CONFIGURE_ARGS")
    set(source ${_ngramspec_consumer_source}/${name})
    set(binary ${_ngramspec_consumer_binary}/${name})
    add_test(NAME consumer.${name}.configure
      COMMAND ${CMAKE_COMMAND} --fresh -S ${source} -B ${binary} ${_ngramspec_consumer_args} ${arg_CONFIGURE_ARGS})
    set_tests_properties(consumer.${name}.configure PROPERTIES
      FIXTURES_SETUP consumer_${name}_configured FIXTURES_REQUIRED "${arg_REQUIRES}" TIMEOUT 300)
    add_test(NAME consumer.${name}.build COMMAND ${CMAKE_COMMAND} --build ${binary} --config $<CONFIG>)
    set_tests_properties(consumer.${name}.build PROPERTIES
      FIXTURES_REQUIRED consumer_${name}_configured FIXTURES_SETUP consumer_${name}_built TIMEOUT 600)
    add_test(NAME consumer.${name}.run
      COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${binary} -C $<CONFIG> --output-on-failure --no-tests=error)
    set_tests_properties(consumer.${name}.run PROPERTIES FIXTURES_REQUIRED consumer_${name}_built TIMEOUT 120)
  endfunction()

  if(NGRAMSPEC_INSTALL)
    get_target_property(_ngramspec_type ngramspec TYPE)
    if(_ngramspec_type STREQUAL "SHARED_LIBRARY")
      # $<SEMICOLON>: a plain ";" would split the test's argument in two.
      string(CONCAT _ngramspec_library_files "$<TARGET_FILE_NAME:ngramspec>$<SEMICOLON>"
        "$<TARGET_SONAME_FILE_NAME:ngramspec>$<SEMICOLON>$<TARGET_LINKER_FILE_NAME:ngramspec>")
    else()
      set(_ngramspec_library_files "$<TARGET_FILE_NAME:ngramspec>")
    endif()
    set(_ngramspec_extra_files "")
    if(TARGET ngramspec_c)
      # The C ABI: libngramspec.so, its SONAME link and the real file, and the pkg-config file.
      string(CONCAT _ngramspec_library_files "${_ngramspec_library_files}$<SEMICOLON>"
        "$<TARGET_FILE_NAME:ngramspec_c>$<SEMICOLON>$<TARGET_SONAME_FILE_NAME:ngramspec_c>$<SEMICOLON>"
        "$<TARGET_LINKER_FILE_NAME:ngramspec_c>")
      set(_ngramspec_extra_files "${CMAKE_INSTALL_LIBDIR}/pkgconfig/ngramspec.pc")
    endif()
    add_test(NAME consumer.install
      COMMAND ${CMAKE_COMMAND}
        -DBUILD_DIR=${PROJECT_BINARY_DIR}
        -DPREFIX=${_ngramspec_consumer_prefix}
        -DCONFIG=$<CONFIG>
        -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
        -DINCLUDEDIR=${CMAKE_INSTALL_INCLUDEDIR}
        -DLIBDIR=${CMAKE_INSTALL_LIBDIR}
        -DDATADIR=${CMAKE_INSTALL_DATADIR}
        "-DLIBRARY_FILES=${_ngramspec_library_files}"
        "-DEXTRA_FILES=${_ngramspec_extra_files}"
        -P ${_ngramspec_consumer_source}/install_and_check.cmake)
    set_tests_properties(consumer.install PROPERTIES FIXTURES_SETUP ngramspec_installed TIMEOUT 120)
    _ngramspec_consumer_test(find_package REQUIRES ngramspec_installed
      CONFIGURE_ARGS
        -DCMAKE_PREFIX_PATH=${_ngramspec_consumer_prefix}
        -DNGRAMSPEC_EXPECTED_PREFIX=${_ngramspec_consumer_prefix}
        -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)

    # The C++ library linked by its file name, statically (-Wl,-Bstatic -lngramspec_cpp), and the
    # C ABI's name naming no static library. GNU-style drivers only.
    get_target_property(_ngramspec_type ngramspec TYPE)
    if(_ngramspec_type STREQUAL "STATIC_LIBRARY" AND TARGET ngramspec_c AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang"
       AND NOT APPLE AND NOT WIN32)
      add_test(NAME consumer.static_link_by_name
        COMMAND ${CMAKE_COMMAND}
          -DPREFIX=${_ngramspec_consumer_prefix}
          -DLIBDIR=${CMAKE_INSTALL_LIBDIR}
          -DINCLUDEDIR=${CMAKE_INSTALL_INCLUDEDIR}
          -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
          "-DCXX_FLAGS=${CMAKE_CXX_FLAGS}"
          -DSOURCE=${_ngramspec_consumer_source}/consumer.cpp
          -DBINARY_DIR=${_ngramspec_consumer_binary}/static_link
          -P ${_ngramspec_consumer_source}/static_link_consumer.cmake)
      set_tests_properties(consumer.static_link_by_name PROPERTIES FIXTURES_REQUIRED ngramspec_installed TIMEOUT 300)
    endif()

    # The C ABI from C: with find_package (ngramspec::ngramspec_c), and with pkg-config alone.
    if(TARGET ngramspec_c)
      list(JOIN NGRAMSPEC_C_SANITIZER_FLAGS " " _ngramspec_c_sanitizers)
      list(JOIN NGRAMSPEC_C_SANITIZER_LINK_FLAGS " " _ngramspec_c_sanitizer_link)
      string(STRIP "${CMAKE_C_FLAGS} ${_ngramspec_c_sanitizers}" _ngramspec_consumer_c_flags)
      string(STRIP "${CMAKE_EXE_LINKER_FLAGS} ${_ngramspec_c_sanitizer_link}" _ngramspec_consumer_c_link_flags)
      _ngramspec_consumer_test(c_api REQUIRES ngramspec_installed
        CONFIGURE_ARGS
          -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}
          "-DCMAKE_C_FLAGS=${_ngramspec_consumer_c_flags}"
          "-DCMAKE_EXE_LINKER_FLAGS=${_ngramspec_consumer_c_link_flags}"
          -DCMAKE_PREFIX_PATH=${_ngramspec_consumer_prefix}
          -DNGRAMSPEC_EXPECTED_PREFIX=${_ngramspec_consumer_prefix}
          -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
      find_program(NGRAMSPEC_PKG_CONFIG NAMES pkg-config pkgconf DOC "pkg-config, for the consumer.pkg_config test")
      if(NGRAMSPEC_PKG_CONFIG)
        add_test(NAME consumer.pkg_config
          COMMAND ${CMAKE_COMMAND}
            -DPKG_CONFIG=${NGRAMSPEC_PKG_CONFIG}
            -DPREFIX=${_ngramspec_consumer_prefix}
            -DLIBDIR=${CMAKE_INSTALL_LIBDIR}
            -DC_COMPILER=${CMAKE_C_COMPILER}
            "-DC_FLAGS=${_ngramspec_consumer_c_flags}"
            "-DLINK_FLAGS=${_ngramspec_c_sanitizer_link}"
            -DSOURCE=${_ngramspec_consumer_source}/c_api/consumer.c
            -DBINARY_DIR=${_ngramspec_consumer_binary}/pkg_config
            -DEXPECTED_VERSION=${PROJECT_VERSION}
            -P ${_ngramspec_consumer_source}/pkg_config_consumer.cmake)
        set_tests_properties(consumer.pkg_config PROPERTIES FIXTURES_REQUIRED ngramspec_installed TIMEOUT 120)
      else()
        add_test(NAME consumer.pkg_config
          COMMAND ${CMAKE_COMMAND} -E echo
            "SKIPPED: pkg-config is not installed (apt-get install pkg-config), so the pkg-config build is not tested")
        set_tests_properties(consumer.pkg_config PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED:")
      endif()
    endif()
  endif()

  # As a subproject, ngramspec must not look for its test and benchmark dependencies at all:
  # disabling them makes any such find_package fail the configure.
  set(_ngramspec_no_dev_dependencies
    -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
  _ngramspec_consumer_test(add_subdirectory
    CONFIGURE_ARGS -DNGRAMSPEC_SOURCE_DIR=${PROJECT_SOURCE_DIR} ${_ngramspec_no_dev_dependencies})
  _ngramspec_consumer_test(fetch_content
    CONFIGURE_ARGS -DNGRAMSPEC_SOURCE_DIR=${PROJECT_SOURCE_DIR} ${_ngramspec_no_dev_dependencies})

  # The README's usage example is examples/usage.cpp, the demo output it shows is what the demo
  # prints, and the examples that docs/ shows are the files of examples/.
  add_test(NAME readme.usage_example
    COMMAND ${CMAKE_COMMAND} -DDOC=${PROJECT_SOURCE_DIR}/README.md "-DBLOCK=example: examples/usage.cpp"
      -DEXPECTED_FILE=${PROJECT_SOURCE_DIR}/examples/usage.cpp
      -P ${_ngramspec_consumer_source}/check_doc_block.cmake)
  add_test(NAME docs.batch_example
    COMMAND ${CMAKE_COMMAND} -DDOC=${PROJECT_SOURCE_DIR}/docs/BATCHING.md "-DBLOCK=example: examples/batch_usage.cpp"
      -DEXPECTED_FILE=${PROJECT_SOURCE_DIR}/examples/batch_usage.cpp
      -P ${_ngramspec_consumer_source}/check_doc_block.cmake)
  add_test(NAME docs.corpus_example
    COMMAND ${CMAKE_COMMAND} -DDOC=${PROJECT_SOURCE_DIR}/docs/CORPORA.md "-DBLOCK=example: examples/corpus_usage.cpp"
      -DEXPECTED_FILE=${PROJECT_SOURCE_DIR}/examples/corpus_usage.cpp
      -P ${_ngramspec_consumer_source}/check_doc_block.cmake)
  add_test(NAME docs.tree_example
    COMMAND ${CMAKE_COMMAND} -DDOC=${PROJECT_SOURCE_DIR}/docs/TREES.md "-DBLOCK=example: examples/tree_usage.cpp"
      -DEXPECTED_FILE=${PROJECT_SOURCE_DIR}/examples/tree_usage.cpp
      -P ${_ngramspec_consumer_source}/check_doc_block.cmake)
  if(NGRAMSPEC_BUILD_EXAMPLES)
    add_test(NAME readme.demo_output
      COMMAND ${CMAKE_COMMAND} -DDOC=${PROJECT_SOURCE_DIR}/README.md "-DBLOCK=output: ngramspec-demo"
        -DPROGRAM=$<TARGET_FILE:ngramspec-demo> -P ${_ngramspec_consumer_source}/check_doc_block.cmake)
    add_test(NAME docs.tree_output
      COMMAND ${CMAKE_COMMAND} -DDOC=${PROJECT_SOURCE_DIR}/docs/TREES.md "-DBLOCK=output: ngramspec-tree-usage"
        -DPROGRAM=$<TARGET_FILE:ngramspec-tree-usage> -P ${_ngramspec_consumer_source}/check_doc_block.cmake)
  endif()

  # The README: only the tests need GoogleTest and GoogleMock, and only the benchmarks Google
  # Benchmark. The release preset configures without them (those left out, saying so), with the
  # programs still to build, and keeps them out on a second configure; the dev preset, which asks for
  # the tests by name, stops, naming what is missing (CMake wraps messages: they are read unwrapped).
  # Configures only (seconds), in the dev suite.
  if(CMAKE_BUILD_TYPE STREQUAL "Debug" AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
    add_test(NAME consumer.presets_without_test_libraries
      COMMAND bash -c [[source=$0; dir=$1; rm -rf "$dir" "$dir-dev"; cd "$source" || exit 1
                        without=(-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
                        out=$(cmake --preset release -B "$dir" "${without[@]}" 2>&1); rc=$?; printf '%s
' "$out"
                        [ "$rc" -eq 0 ] || { echo "FAIL: the release preset does not configure without them"; exit 1; }
                        for said in "the tests are not built \(NGRAMSPEC_BUILD_TESTS=OFF\)" \
                                    "the benchmarks are not built \(NGRAMSPEC_BUILD_BENCHMARKS=OFF\)"; do
                          tr -s ' \n' '  ' <<<"$out" | grep -qE -- "$said" || { echo "FAIL: not said: $said"; exit 1; }
                        done
                        targets=$(cmake --build "$dir" --target help 2>&1)
                        for t in ngramspec-replay ngramspec-corpus ngramspec-generate ngramspec-demo ngramspec_c; do
                          grep -qE "^$t:" <<<"$targets" || { echo "FAIL: no target $t to build"; exit 1; }
                        done
                        out=$(cmake "$dir" 2>&1) || { printf '%s
' "$out"; echo "FAIL: a second configure fails"; exit 1; }
                        out=$(cmake --preset dev -B "$dir-dev" "${without[@]}" 2>&1); rc=$?; printf '%s
' "$out"
                        [ "$rc" -ne 0 ] || { echo "FAIL: the dev preset configures without GoogleTest"; exit 1; }
                        said="NGRAMSPEC_BUILD_TESTS is ON, and the tests need GoogleTest and GoogleMock"
                        tr -s ' \n' '  ' <<<"$out" | grep -qF -- "$said" || { echo "FAIL: not said: $said"; exit 1; }
                        rm -rf "$dir" "$dir-dev"]]
        ${PROJECT_SOURCE_DIR} ${_ngramspec_consumer_binary}/presets_without_test_libraries)
    set_tests_properties(consumer.presets_without_test_libraries PROPERTIES TIMEOUT 300)
  endif()
endif()
