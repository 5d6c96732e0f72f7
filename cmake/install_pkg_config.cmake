# Run by cmake --install (CMakeLists.txt sets the NGRAMSPEC_* variables before it): installs
# ngramspec.pc to NGRAMSPEC_PC_DIR, the variant whose Libs carry -Wl,-rpath,${libdir} unless the
# library's folder under this install's prefix is one the loader searches by itself
# (NGRAMSPEC_SYSTEM_LIBDIRS: the toolchain's implicit link folders, /lib, /usr/lib and the like).

set(_libdir "${NGRAMSPEC_PC_LIBDIR}")
if(NOT IS_ABSOLUTE "${_libdir}")
  set(_libdir "${CMAKE_INSTALL_PREFIX}/${_libdir}")
endif()
cmake_path(NORMAL_PATH _libdir)
string(REGEX REPLACE "(.)/$" "\\1" _libdir "${_libdir}")
set(_kind rpath)
foreach(_dir IN LISTS NGRAMSPEC_SYSTEM_LIBDIRS)
  cmake_path(NORMAL_PATH _dir)
  string(REGEX REPLACE "(.)/$" "\\1" _dir "${_dir}")
  if(_dir STREQUAL _libdir)
    set(_kind system)
  endif()
endforeach()
set(_pc_dir "${NGRAMSPEC_PC_DIR}")
if(NOT IS_ABSOLUTE "${_pc_dir}")
  set(_pc_dir "${CMAKE_INSTALL_PREFIX}/${_pc_dir}")
endif()
file(INSTALL DESTINATION "${_pc_dir}" TYPE FILE FILES "${NGRAMSPEC_PC_BUILT}/${_kind}/ngramspec.pc")
